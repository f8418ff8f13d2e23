"""Brand-new items from an ``.item`` atomic file or raw text, weighted exactly as the training items
(``ItemFeatures.transform``). Raw text goes through the analyzer the converter stored (``NAME.analyzer.json``, copied
into the artifact); a field it does not describe is split as RecBole splits it. Tokens without a learned weight are
ignored and counted in an ``UnknownTokensWarning``.
"""

import csv
import os
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pandas as pd
import scipy.sparse as sp
from recbole.utils import FeatureType

from recbole_fbsm.convert.text import default_sep
from recbole_fbsm.data.atomic_files import AtomicFile, check_ids, count_rows, quote_problem
from recbole_fbsm.errors import ColdStartError


class ServeWarning(UserWarning):
    """Something the user of the serving tools should know; the command line prints these."""


class UnknownTokensWarning(ServeWarning):
    """Some tokens of the new items are unknown to the trained model and were ignored."""


@dataclass
class NewItems:
    source: str  # what the items came from, for messages ("new-item file x.item", "request", "catalogue")
    tokens: list  # external ids of the new items, in file order
    counts: sp.csr_matrix  # term counts over the model's feature columns (known tokens only)
    matrix: sp.csr_matrix  # weighted rows, as the training items' rows of F
    unknown: Counter = field(default_factory=Counter)  # "field:token" -> occurrences, not in the vocabulary
    weightless: Counter = field(default_factory=Counter)  # "field:token" -> occurrences, no training item has it
    featureless: list = field(default_factory=list)  # new items left without any weighted feature
    raw: bool = False  # True: the cells were raw text, analysed as the converter did
    origin: dict = field(default_factory=dict)  # field -> {term: Counter of the raw words that gave it}
    analyzers: dict = field(default_factory=dict)  # field -> the stored analyzer applied to its raw text
    hint: str = None  # for pre-tokenised input whose unknown tokens look like raw words

    def __len__(self):
        return len(self.tokens)

    @property
    def n_ignored(self):
        return sum(self.unknown.values()) + sum(self.weightless.values())

    def index(self, token):
        """Row of the new item ``token``; a ColdStartError when the file has no such item."""
        try:
            return self.tokens.index(str(token))
        except ValueError:
            raise ColdStartError(f"item {token!r} is neither in the dataset nor in the {self.source}.") from None


def read_header(path, separator, encoding="utf-8"):
    """{field: FeatureType} of an atomic file's header, with errors naming the file."""
    try:
        with open(path, encoding=encoding) as handle:
            header = handle.readline().rstrip("\r\n").removeprefix("\ufeff")  # a spreadsheet's byte order mark
    except UnicodeDecodeError as error:  # the first chunk read holds the rows of a small file too
        byte = error.object[error.start : error.start + 1]
        raise ColdStartError(
            f"new-item file {path} is not {encoding} text (byte {error.start}: {byte!r}); save it as {encoding} "
            "(the encoding the model's dataset was read with, setting 'encoding')."
        ) from None
    if not header.strip():
        raise ColdStartError(
            f"new-item file {path} is empty: expected a header such as 'item_id:token{separator}words:token_seq' "
            "and one row per new item."
        )
    columns = {}
    for column in header.split(separator):
        name, _, kind = column.partition(":")
        try:
            columns[name] = FeatureType(kind)
        except ValueError:
            raise ColdStartError(
                f"new-item file {path}: header column {column!r} is not 'field:type' with a RecBole type "
                f"(token, token_seq, float, float_seq)."
            ) from None
    return columns


def read_atomic_items(path, served):
    """(item ids, {field: cells}) of an ``.item`` file in the training file's format, with its checks."""
    config, dataset = served.config, served.dataset
    separator = config["field_separator"] or "\t"
    encoding = config["encoding"] or "utf-8"
    columns = read_header(path, separator, encoding)
    iid = served.iid_field
    if iid not in columns:
        raise ColdStartError(
            f"new-item file {path} has no item id column {iid!r}: its header has {sorted(columns)}; "
            f"expected '{iid}:token' and the feature fields {served.fields}."
        )
    missing = [f for f in served.fields if f not in columns]
    if missing:
        raise ColdStartError(
            f"new-item file {path} lacks feature field(s) {missing}: the model was trained on {served.fields}; "
            f"the file's header has {sorted(columns)}."
        )
    for name in served.fields:
        expected = dataset.field2type[name]
        if columns[name] != expected:
            raise ColdStartError(
                f"new-item file {path}: field {name!r} is {columns[name].value}, but the model was trained "
                f"on it as {expected.value}."
            )
    # every line has the header's column count: pandas would shift, drop or blank the cells of the others
    n_rows = count_rows(path, separator, len(columns), encoding)
    wanted = [iid] + list(served.fields)
    header = [f"{name}:{columns[name].value}" for name in wanted]
    frame = pd.read_csv(
        path, delimiter=separator, usecols=header, dtype=str, encoding=encoding, engine="python", keep_default_na=False
    )  # cells are text: an item or a token 'NA' is not missing; count_rows checked the text's encoding
    atomic = AtomicFile(path, {name: kind.value for name, kind in columns.items()}, n_rows)
    if len(frame) != n_rows:
        raise ColdStartError(quote_problem(atomic, separator, encoding, f"{len(frame)} rows were read"))
    frame.columns = [column.split(":")[0] for column in frame.columns]
    if len(frame) == 0:
        raise ColdStartError(f"new-item file {path} has a header but no item rows: expected one row per new item.")
    report = SimpleNamespace(warnings=[])
    check_ids(atomic, iid, frame[iid], unique=True, report=report)  # the training reader's checks and warnings
    for message in report.warnings:
        warnings.warn(message, ServeWarning, stacklevel=3)
    return [str(t) for t in frame[iid].tolist()], {name: frame[name].tolist() for name in served.fields}


def read_new_items(served, path, warn=True, raw_text=None):
    """The new items of ``path`` weighted for ``served`` (the file as ``read_item_cells`` reads it)."""
    tokens, values, raw = read_item_cells(served, path, raw_text)
    return new_items_from_cells(served, tokens, values, raw, source=f"new-item file {path}", warn=warn)


def read_item_cells(served, path, raw_text=None):
    """(item ids, {field: cells}, raw) of an ``.item`` file in the training file's format, or of a CSV/TSV file of
    raw text (``raw_text.read_text_table``) analysed as the converter analysed the training text. ``raw_text``:
    None: CSV/TSV is raw text, an ``.item`` file tokens; True / False: the cells are raw text / tokens."""
    path = str(path)
    if not os.path.isfile(path):
        raise ColdStartError(f"new-item file {path} not found.")
    if is_atomic_header(path, served.config["field_separator"] or "\t"):
        return (*read_atomic_items(path, served), bool(raw_text))
    return (*read_text_table(path, served), raw_text is not False)


def new_items_from_cells(served, tokens, values, raw, source, warn=True):
    """Weight new items given as cells: ``tokens`` (their ids) and ``values`` ({field: one cell per item}: tokens
    as RecBole splits them, or raw text when ``raw``); ``source`` names the input in errors ("request")."""
    config, dataset = served.config, served.dataset
    _check_ids(source, tokens, served)

    names = served.features.names
    column_of = {name: k for k, name in enumerate(names)}
    seq_len = config["seq_len"] or {}
    rows, cols = [], []
    unknown, weightless, origin, used = Counter(), Counter(), {}, {}  # used: analyzer per field
    for name in served.fields:
        cells, words, analyzer = tokenize_field(values[name], name, served, raw)
        if analyzer is not None:
            origin[name], used[name] = words, analyzer
        if name in seq_len and dataset.field2type[name] == FeatureType.TOKEN_SEQ:
            cells = [cell[: int(seq_len[name])] for cell in cells]
        field_tokens = pd.Series([t for cell in cells for t in cell], dtype=object)
        keys = f"{name}:" + field_tokens
        owner = np.repeat(np.arange(len(cells)), [len(cell) for cell in cells])
        mapped = keys.map(column_of)
        known = mapped.notna().to_numpy()
        # the model's columns are the training vocabulary: a token of the dataset that no training item
        # has is "weightless" (known to the data, never learned), anything else unknown
        in_dataset = field_tokens.isin(list(dataset.field2token_id[name])).to_numpy() & ~known
        unknown.update(keys[~known & ~in_dataset].tolist())
        weightless.update(keys[in_dataset].tolist())
        rows.append(owner[known])  # every column of the training vocabulary has a weight (idf >= 1, or 1)
        cols.append(mapped[known].to_numpy(dtype=np.int64))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    counts = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(tokens), len(names)))
    counts.sum_duplicates()
    matrix = served.features.transform(counts[:, : len(served.features.column_weights)])  # no identity columns
    featureless = [tokens[k] for k in np.flatnonzero(np.diff(matrix.indptr) == 0)]
    hint = None if raw or not served.analyzers else raw_text_hint(unknown, served.analyzers, column_of)
    items = NewItems(source, tokens, counts, matrix, unknown, weightless, featureless, raw, origin, used, hint)
    if warn and (items.n_ignored or items.featureless):  # an empty description ignores no token
        warnings.warn(unknown_tokens_message(items), UnknownTokensWarning, stacklevel=2)
    return items


def unknown_tokens_message(items):
    parts = []
    plain = Counter(items.unknown)
    for name, analyzer in items.analyzers.items():
        analysed = Counter({t: n for t, n in items.unknown.items() if t.partition(":")[0] == name})
        if analysed:
            parts.append(dropped_words_message(name, analysed, items.origin[name], analyzer))
            plain -= analysed
    if plain:
        examples = ", ".join(repr(t) for t, _ in plain.most_common(5))
        parts.append(
            f"{sum(plain.values())} occurrence(s) of {len(plain)} token(s) not in the "
            f"training vocabulary (e.g. {examples})"
        )
        split_only = sorted({t.partition(":")[0] for t in plain})
        if items.raw:
            parts[-1] += (
                f" (the dataset has no analyzer file, NAME.analyzer.json, for {', '.join(map(repr, split_only))}: "
                "its raw text is split as RecBole splits a cell, token_seq on the separator and token whole, "
                "case and punctuation kept)"
            )
    if items.weightless:
        examples = ", ".join(repr(t) for t, _ in items.weightless.most_common(5))
        parts.append(
            f"{sum(items.weightless.values())} occurrence(s) of {len(items.weightless)} token(s) that no "
            f"training item has, so without a learned weight (e.g. {examples})"
        )
    message = f"{items.source}:"
    if items.n_ignored:
        why = "; ".join(parts)
        message += f" {items.n_ignored} feature token occurrence(s) unknown to the trained model were ignored: {why}."
    if items.hint:
        message += f" {items.hint}."
    if items.featureless:
        shown = ", ".join(repr(t) for t in items.featureless[:5]) + (" ..." if len(items.featureless) > 5 else "")
        message += (
            f" {len(items.featureless)} new item(s) have no known feature left and score 0 for every user "
            f"(their lists of users are in arbitrary order): {shown}."
        )
    return message


def _check_ids(source, tokens, served):
    blank = [k + 2 for k, t in enumerate(tokens) if not t.strip()]
    if blank:  # only a file's: a request's ids passed http.check_id, the store's came from either
        raise ColdStartError(f"{source}: empty item id on line(s) {blank[:10]}.")
    repeated = sorted(t for t, n in Counter(tokens).items() if n > 1)
    if repeated:
        raise ColdStartError(f"{source}: item id(s) {repeated[:10]} appear more than once.")
    known = served.dataset.field2token_id[served.iid_field]
    clashes = [t for t in tokens if t in known and known[t] != 0]
    if clashes:
        shown = ", ".join(repr(t) for t in clashes[:10]) + (" ..." if len(clashes) > 10 else "")
        raise ColdStartError(
            f"{source}: {len(clashes)} item id(s) already belong to items of dataset "
            f"{served.dataset.dataset_name!r}: {shown}. New items need ids the trained model has never seen "
            "(write them under new ids)."
        )


def write_items_as_new(item_file, out_file, tokens, prefix="new_", separator="\t", id_field="item_id"):
    """Copy the rows of ``tokens`` from an ``.item`` file to ``out_file`` under the ids ``prefix + token``: new
    items with the features of existing ones, to try the serve commands (docs/serve.md). Returns the new ids."""
    wanted = {str(t) for t in tokens}
    written = []
    with open(item_file, encoding="utf-8") as source, open(out_file, "w", encoding="utf-8") as target:
        header = source.readline()
        target.write(header)
        id_column = [c.split(":")[0] for c in header.rstrip("\r\n").split(separator)].index(id_field)
        for line in source:
            cells = line.rstrip("\r\n").split(separator)
            if cells[id_column] in wanted:
                cells[id_column] = prefix + cells[id_column]
                written.append(cells[id_column])
                target.write(separator.join(cells) + "\n")
    return written


def tokenize_field(values, name, served, raw):
    """(tokens of field ``name`` for each cell of ``values``, {token: Counter of the words that gave it}, the
    analyzer): raw text through the stored analyzer, else RecBole's own reading of pre-tokenised cells (no
    words, no analyzer)."""
    record = served.analyzers.get(name)
    if raw and record is not None:
        analyzer, cells, origin = record.analyzer, [], defaultdict(Counter)
        for value in values:
            words = analyzer.words(str(value))
            cells.append([analyzer.stem(word) for word in words])
            for word, token in zip(words, cells[-1]):
                origin[token][word] += 1
        return cells, dict(origin), analyzer
    if served.dataset.field2type[name] == FeatureType.TOKEN_SEQ:
        separator = served.config["seq_separator"] or " "
        return [[t for t in str(value).split(separator) if t] for value in values], {}, None
    return [[str(value)] if str(value) != "" else [] for value in values], {}, None


def read_text_table(path, served):
    """(item ids, {field: raw cells}) of a CSV/TSV file with a header line: the id column is the item id field's
    or the first; a feature field's is its own or the raw-text column the converter recorded (``text`` for
    ``words``); other columns are ignored."""
    separator = default_sep(path)  # tab for .tsv / .tab, comma otherwise, as `convert text`
    try:
        with open(path, newline="", encoding=served.config["encoding"] or "utf-8") as handle:
            reader = csv.reader(handle, delimiter=separator)
            rows = [(reader.line_num, row) for row in reader if row]  # a quoted cell may span lines
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise ColdStartError(
            f"new-item file {path} cannot be read as {'TSV' if separator == chr(9) else 'CSV'}: {error}"
        ) from None
    if not rows:
        raise ColdStartError(f"new-item file {path} is empty: expected a header line and one row per new item.")
    header = [column.strip() for column in rows[0][1]]
    iid = served.iid_field
    id_column = header.index(iid) if iid in header else 0
    columns = {}
    for name in served.fields:
        record = served.analyzers.get(name)
        choices = [name] + ([record.raw_column] if record is not None and record.raw_column != name else [])
        found = [c for c in choices if c in header]
        if not found:
            raise ColdStartError(
                f"new-item file {path} has no column for feature field {name!r}: expected a column named "
                f"{' or '.join(repr(c) for c in choices)}; the header has {header}."
            )
        columns[name] = header.index(found[0])
    body = rows[1:]
    if not body:
        raise ColdStartError(f"new-item file {path} has a header but no item rows: expected one row per new item.")
    for relation, test in (("fewer", lambda n: n < len(header)), ("more", lambda n: n > len(header))):
        wrong = [line for line, row in body if test(len(row))]
        if wrong:  # a short row is not read as empty cells, a long row's extra cell is not dropped
            raise ColdStartError(
                f"new-item file {path}: line(s) {wrong[:10]} have {relation} than the header's {len(header)} columns "
                f"(separator {separator!r}, from the file extension)."
            )
    tokens = [row[id_column].strip() for _, row in body]
    return tokens, {name: [row[k] for _, row in body] for name, k in columns.items()}


def is_atomic_header(path, separator):
    """True when the first line looks like an atomic file's header: every column 'field:type'."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = handle.readline().rstrip("\r\n")
    except OSError:
        return True  # let the atomic reader report the problem
    return not first.strip() or all(":" in column for column in first.split(separator))


def dropped_words_message(name, unknown, origin, analyzer):
    """'words: 3 of 25 words dropped after stop-word removal and stemming ... (e.g. 'fertilizer' -> 'fertil')'
    for the unknown tokens of one analysed field."""
    examples = []
    for token, _ in unknown.most_common():
        words = origin.get(token.partition(":")[2])
        if words:
            word, term = words.most_common(1)[0][0], token.partition(":")[2]
            examples.append(f"{word!r} -> {term!r}" if word != term else repr(word))
        if len(examples) == 5:
            break
    total = sum(sum(words.values()) for words in origin.values())
    dropped = sum(unknown.values())
    if analyzer.kind == "whole":
        return f"{name}: {dropped} of {total} tags not in the training vocabulary (e.g. {', '.join(examples)})"
    parts = {"stop-word removal": analyzer.stop_words, "stemming": analyzer.stemmer}
    steps = [step for step, part in parts.items() if part is not None]
    after = f" after {' and '.join(steps)}" if steps else ""
    return (
        f"{name}: {dropped} of {total} words dropped{after}, as their terms are not in the training vocabulary "
        f"(e.g. {', '.join(examples)})"
    )


def raw_text_hint(unknown, analyzers, known_columns):
    """For a pre-tokenised file: how many unknown tokens would be known after the dataset's analyzer (the
    file then probably holds raw words), with an example; None when none would."""
    helped, example = 0, None
    for token, count in unknown.items():
        name, _, value = token.partition(":")
        record = analyzers.get(name)
        if record is None:
            continue
        terms = record.analyzer(value)
        if terms and all(f"{name}:{t}" in known_columns for t in terms):
            helped += count
            example = example or f"{value!r} -> {' '.join(terms)!r}"
    if not helped:
        return None
    return (
        f"{helped} of them become known terms through the dataset's analyzer (e.g. {example}): the file seems "
        "to hold raw text; give it as a CSV/TSV file or with --raw-text (raw_text=True) to analyse it as training did"
    )
