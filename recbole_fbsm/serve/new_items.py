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
from recbole_fbsm.data.atomic_files import check_ids, quote_problem, scan
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


def read_atomic_items(path, served):
    """(item ids, {field: cells}) of an ``.item`` file in the training file's format, read and checked by the
    training reader's own ``data.atomic_files`` checks."""
    config = served.config
    separator, encoding = config["field_separator"] or "\t", config["encoding"] or "utf-8"
    atomic = scan(path, separator, encoding)
    columns, iid = atomic.columns, served.iid_field
    if iid not in columns:
        raise ColdStartError(f"new-item file {path} has no item id column {iid!r}: its header has {sorted(columns)}.")
    missing = [f for f in served.fields if f not in columns]
    if missing:
        raise ColdStartError(f"new-item file {path} lacks feature field(s) {missing}: the model reads {served.fields}.")
    for name in served.fields:
        expected = served.dataset.field2type[name].value
        if columns[name] != expected:
            raise ColdStartError(f"new-item file {path}: field {name!r} is {columns[name]}, the model's is {expected}.")
    if not atomic.n_rows:
        raise ColdStartError(f"new-item file {path} has a header but no item rows: expected one row per new item.")
    wanted = [f"{name}:{columns[name]}" for name in [iid, *served.fields]]
    frame = pd.read_csv(
        path, delimiter=separator, usecols=wanted, dtype=str, encoding=encoding, engine="python", keep_default_na=False
    )  # cells are text: an item or a token 'NA' is not missing
    if len(frame) != atomic.n_rows:
        raise ColdStartError(quote_problem(atomic, separator, encoding, f"{len(frame)} rows were read"))
    frame.columns = [column.split(":")[0] for column in frame.columns]
    report = SimpleNamespace(warnings=[])
    check_ids(atomic, iid, frame[iid], unique=True, report=report)
    for message in report.warnings:
        warnings.warn(message, ServeWarning, stacklevel=3)
    return frame[iid].tolist(), {name: frame[name].tolist() for name in served.fields}


def read_new_items(served, path, warn=True, raw_text=None):
    """The new items of ``path`` weighted for ``served`` (the file as ``read_item_cells`` reads it)."""
    tokens, values, raw = read_item_cells(served, path, raw_text)
    return new_items_from_cells(served, tokens, values, raw, source=f"new-item file {path}", warn=warn)


def read_item_cells(served, path, raw_text=None):
    """(item ids, {field: cells}, raw) of an ``.item`` file in the training file's format (its header's columns
    are all 'field:type'), or of a CSV/TSV file of raw text. ``raw_text``: None: CSV/TSV is raw text, an ``.item``
    file tokens; True / False: the cells are raw text / tokens."""
    path = str(path)
    if not os.path.isfile(path):
        raise ColdStartError(f"new-item file {path} not found.")
    with open(path, encoding="utf-8", errors="replace") as handle:
        first = handle.readline().rstrip("\r\n")
    if not first.strip() or all(":" in column for column in first.split(served.config["field_separator"] or "\t")):
        return (*read_atomic_items(path, served), bool(raw_text))
    return (*read_text_table(path, served), raw_text is not False)


def new_items_from_cells(served, tokens, values, raw, source, warn=True):
    """Weight new items given as cells: ``tokens`` (their ids) and ``values`` ({field: one cell per item}: tokens
    as RecBole splits them, or raw text when ``raw``); ``source`` names the input in errors ("request")."""
    known = served.dataset.field2token_id[served.iid_field]
    clashes = [t for t in tokens if known.get(t, 0)]
    if clashes:
        raise ColdStartError(
            f"{source}: {len(clashes)} item id(s) already belong to items of dataset "
            f"{served.dataset.dataset_name!r}: {', '.join(map(repr, clashes[:10]))}. New items need new ids."
        )
    names = served.features.names
    column_of = {name: k for k, name in enumerate(names)}
    seq_len = served.config["seq_len"] or {}
    rows, cols = [], []
    unknown, weightless, origin, used = Counter(), Counter(), {}, {}  # used: analyzer per field
    for name in served.fields:
        cells, words, analyzer = tokenize_field(values[name], name, served, raw)
        if analyzer is not None:
            origin[name], used[name] = words, analyzer
        if name in seq_len and served.dataset.field2type[name] == FeatureType.TOKEN_SEQ:
            cells = [cell[: int(seq_len[name])] for cell in cells]
        field_tokens = pd.Series([t for cell in cells for t in cell], dtype=object)
        keys = f"{name}:" + field_tokens
        mapped = keys.map(column_of)
        found = mapped.notna().to_numpy()
        # a token of the dataset that no training item has is "weightless" (never learned), anything else unknown
        in_dataset = field_tokens.isin(list(served.dataset.field2token_id[name])).to_numpy() & ~found
        unknown.update(keys[~found & ~in_dataset].tolist())
        weightless.update(keys[in_dataset].tolist())
        rows.append(np.repeat(np.arange(len(cells)), [len(cell) for cell in cells])[found])
        cols.append(mapped[found].to_numpy(dtype=np.int64))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    counts = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(tokens), len(names)))
    counts.sum_duplicates()
    matrix = served.features.transform(counts[:, : len(served.features.column_weights)])  # no identity columns
    featureless = [tokens[k] for k in np.flatnonzero(np.diff(matrix.indptr) == 0)]
    items = NewItems(source, tokens, counts, matrix, unknown, weightless, featureless, raw, origin, used)
    if warn and (items.n_ignored or items.featureless):
        warnings.warn(unknown_tokens_message(items), UnknownTokensWarning, stacklevel=2)
    return items


def unknown_tokens_message(items):
    """One line: the tokens ignored (unknown, or weightless), by field, and the items left without a feature."""
    parts, plain = [], Counter(items.unknown)
    for name, analyzer in items.analyzers.items():
        analysed = Counter({t: n for t, n in items.unknown.items() if t.partition(":")[0] == name})
        if analysed:
            parts.append(dropped_words_message(name, analysed, items.origin[name], analyzer))
            plain -= analysed
    for counter, what in ((plain, "not in the training vocabulary"), (items.weightless, "that no training item has")):
        if counter:
            examples = ", ".join(repr(t) for t, _ in counter.most_common(5))
            parts.append(f"{sum(counter.values())} occurrence(s) of {len(counter)} token(s) {what} (e.g. {examples})")
    if plain and items.raw:
        parts[-1 - bool(items.weightless)] += (
            " (no analyzer file, NAME.analyzer.json, for "
            f"{', '.join(sorted({repr(t.partition(':')[0]) for t in plain}))}: its raw text is split as RecBole "
            "splits a cell)"
        )
    message = f"{items.source}:"
    if items.n_ignored:
        message += f" {items.n_ignored} feature token occurrence(s) unknown to the trained model were ignored: "
        message += "; ".join(parts) + "."
    if items.featureless:
        message += (
            f" {len(items.featureless)} new item(s) have no known feature left and score 0 for every user: "
            f"{', '.join(repr(t) for t in items.featureless[:5])}."
        )
    return message


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
    analyzer): raw text through the stored analyzer, else RecBole's own reading of pre-tokenised cells."""
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
    except (UnicodeDecodeError, csv.Error) as error:
        raise ColdStartError(f"new-item file {path} cannot be read with separator {separator!r}: {error}") from None
    if len(rows) < 2:
        raise ColdStartError(f"new-item file {path} has no item rows: expected a header line and one row per item.")
    header = [column.strip() for column in rows[0][1]]
    columns = {}
    for name in served.fields:
        record = served.analyzers.get(name)
        choices = [name] + ([record.raw_column] if record is not None and record.raw_column != name else [])
        found = [header.index(c) for c in choices if c in header]
        if not found:
            raise ColdStartError(
                f"new-item file {path} has no column for feature field {name!r}: expected a column named "
                f"{' or '.join(repr(c) for c in choices)}; the header has {header}."
            )
        columns[name] = found[0]
    wrong = [(line, len(row)) for line, row in rows[1:] if len(row) != len(header)]
    if wrong:  # a short row is not read as empty cells, a long row's extra cell is not dropped
        relation = "fewer" if wrong[0][1] < len(header) else "more"
        raise ColdStartError(
            f"new-item file {path}: line(s) {[line for line, _ in wrong][:10]} have {relation} than the header's "
            f"{len(header)} columns (separator {separator!r}, from the file extension)."
        )
    id_column = header.index(served.iid_field) if served.iid_field in header else 0
    tokens = [row[id_column].strip() for _, row in rows[1:]]
    wrong = [t for t, n in Counter(tokens).items() if n > 1 or not t]
    if wrong:
        raise ColdStartError(f"new-item file {path}: item id(s) {wrong[:10]} are empty or on several rows.")
    return tokens, {name: [row[k] for _, row in rows[1:]] for name, k in columns.items()}


def dropped_words_message(name, unknown, origin, analyzer):
    """'words: 3 of 25 words dropped after stop-word removal and stemming ... (e.g. 'fertilizer' -> 'fertil')'
    for the unknown tokens of one analysed field."""
    examples = []
    for token, _ in unknown.most_common(5):
        term = token.partition(":")[2]
        word = origin[term].most_common(1)[0][0]
        examples.append(f"{word!r} -> {term!r}" if word != term else repr(word))
    total = sum(sum(words.values()) for words in origin.values())
    examples = ", ".join(examples)
    if analyzer.kind == "whole":
        return f"{name}: {sum(unknown.values())} of {total} tags not in the training vocabulary (e.g. {examples})"
    steps = [
        step for step, part in (("stop-word removal", analyzer.stop_words), ("stemming", analyzer.stemmer)) if part
    ]
    after = f" after {' and '.join(steps)}" if steps else ""
    return (
        f"{name}: {sum(unknown.values())} of {total} words dropped{after}, as their terms are not in the training "
        f"vocabulary (e.g. {examples})"
    )
