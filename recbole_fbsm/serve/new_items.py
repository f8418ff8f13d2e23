"""Brand-new items from an ``.item`` atomic file or raw text, weighted exactly as the training items
(``ItemFeatures.transform``). Raw text goes through the analyzer the converter stored (``NAME.analyzer.json``, copied
into the artifact); a field it does not describe is split as RecBole splits it. Tokens without a learned weight are
ignored and counted in an ``UnknownTokensWarning``.
"""

import csv
import os
import warnings
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pandas as pd
import scipy.sparse as sp
from recbole.utils import FeatureType
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from recbole_fbsm.config.schema import setting
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
    expected = {name: served.dataset.field2type[name].value for name in served.fields}
    wrong = [f"{name}:{kind}" for name, kind in expected.items() if columns.get(name) != kind]
    if wrong:
        raise ColdStartError(
            f"new-item file {path} lacks the feature column(s) {wrong} the model reads: its header has "
            f"{[f'{name}:{kind}' for name, kind in columns.items()]}."
        )
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
    unknown, weightless = Counter(), Counter()
    stop_words = setting(served.config, "stop_words") or ()  # dropped in training as here: no warning for them
    stop_words = frozenset(ENGLISH_STOP_WORDS if stop_words == "english" else (w.lower() for w in stop_words))
    for name in served.fields:
        cells = tokenize_field(values[name], name, served, raw)
        if name in seq_len and served.dataset.field2type[name] == FeatureType.TOKEN_SEQ:
            cells = [cell[: int(seq_len[name])] for cell in cells]
        field_tokens = pd.Series([t for cell in cells for t in cell], dtype=object)
        keys = f"{name}:" + field_tokens
        mapped = keys.map(column_of)
        found = mapped.notna().to_numpy()
        # a token of the dataset that no training item has is "weightless" (never learned), anything else unknown
        ignored = ~found & ~field_tokens.str.lower().isin(stop_words).to_numpy()
        in_dataset = field_tokens.isin(list(served.dataset.field2token_id[name])).to_numpy() & ignored
        unknown.update(keys[ignored & ~in_dataset].tolist())
        weightless.update(keys[in_dataset].tolist())
        rows.append(np.repeat(np.arange(len(cells)), [len(cell) for cell in cells])[found])
        cols.append(mapped[found].to_numpy(dtype=np.int64))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    counts = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(tokens), len(names)))
    counts.sum_duplicates()
    matrix = served.features.transform(counts[:, : len(served.features.column_weights)])  # no identity columns
    featureless = [tokens[k] for k in np.flatnonzero(np.diff(matrix.indptr) == 0)]
    items = NewItems(source, tokens, counts, matrix, unknown, weightless, featureless, raw)
    if warn and (items.n_ignored or items.featureless):
        warnings.warn(unknown_tokens_message(items), UnknownTokensWarning, stacklevel=2)
    return items


def unknown_tokens_message(items):
    """One line: the tokens ignored (unknown, or weightless), and the items left without a feature."""
    message = f"{items.source}:"
    if items.n_ignored:
        parts = [
            f"{sum(counter.values())} occurrence(s) of {len(counter)} token(s) {what} "
            f"(e.g. {', '.join(repr(t) for t, _ in counter.most_common(5))})"
            for counter, what in (
                (items.unknown, "not in the training vocabulary"),
                (items.weightless, "that no training item has"),
            )
            if counter
        ]
        message += f" {items.n_ignored} feature token occurrence(s) unknown to the trained model were ignored: "
        message += "; ".join(parts) + "."
    if items.featureless:
        message += (
            f" {len(items.featureless)} new item(s) have no known feature left and score 0 for every user: "
            f"{', '.join(repr(t) for t in items.featureless[:5])}."
        )
    return message


def tokenize_field(values, name, served, raw):
    """The tokens of field ``name`` in each cell of ``values``: raw text through the stored analyzer (the
    converter's), else RecBole's own reading of a cell (split on ``seq_separator`` for a token_seq field)."""
    record = served.analyzers.get(name)
    if raw and record is not None:
        return [[record.analyzer.stem(word) for word in record.analyzer.words(str(value))] for value in values]
    if served.dataset.field2type[name] == FeatureType.TOKEN_SEQ:
        return [[t for t in str(value).split(served.config["seq_separator"] or " ") if t] for value in values]
    return [[str(value)] if str(value) != "" else [] for value in values]


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
