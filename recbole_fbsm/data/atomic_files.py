"""Checks of RecBole's atomic files (``.inter``, ``.item``, ``.user``) before RecBole reads them.

RecBole reads a malformed file silently or with a traceback (a row with too few columns is padded, an empty
rating becomes the column mean, a duplicate item id keeps one of its rows). Here each problem is one
``ColdStartError`` naming the file, the line and the column and saying what was expected, or a warning with
counts when the run can go on. Only the columns RecBole will load (``load_col``) are checked, read once with
pyarrow's CSV reader; their token columns are handed to the dataset (``fast_load``).
"""

import os
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd
import pyarrow as pa

from recbole_fbsm.config.suggestions import suggestion
from recbole_fbsm.data.fast_load import file_identity, parse_columns, read_table
from recbole_fbsm.errors import ColdStartError

TYPES = ("token", "token_seq", "float", "float_seq")
SHOWN = 3  # examples shown in a message
HEADER_BYTES = 1 << 24  # the longest header line read


@dataclass
class AtomicFile:
    """A checked atomic file: its columns (name -> type, in file order) and its number of data rows."""

    path: str
    columns: dict
    n_rows: int

    @cached_property
    def blank_lines(self):
        """1-based numbers of the blank lines after the header, which the readers skip (the file is read again
        only when a message names a line; line ends as pyarrow's: \\n, \\r\\n or \\r)."""
        with open(self.path, "rb") as handle:
            lengths = np.fromiter(map(len, handle.read().splitlines()), dtype=np.int64)
        return np.flatnonzero(lengths[1:] == 0) + 2

    def line_of_row(self, rows):
        """1-based line numbers of 0-based data rows (the header is line 1; blank lines are skipped)."""
        rows = np.asarray(rows, dtype=np.int64)
        lines = rows + 2
        for blank in self.blank_lines:  # few: usually none
            lines = lines + (lines >= blank)
        return lines


def _where(path, line=None):
    return f"{path}" + (f" line {line}" if line is not None else "")


def read_header(path, separator, encoding="utf-8"):
    """{column name: type} from the first line, or a ColdStartError saying what is wrong with it."""
    with open(path, "rb") as handle:
        first = handle.readline(HEADER_BYTES)
    try:
        header = first.decode(encoding)
    except UnicodeDecodeError as error:
        raise ColdStartError(f"{_where(path, 1)}: the header is not {encoding} text ({error.reason}).") from None
    if header.startswith("\ufeff"):
        raise ColdStartError(
            f"{_where(path, 1)}: the file starts with a byte order mark (BOM), which RecBole would "
            "read as part of the first column's name; save it as UTF-8 without BOM."
        )
    if not header.strip():
        raise ColdStartError(
            f"{path}: the file is empty or its first line is blank; expected a header of "
            "name:type columns (types: token, token_seq, float, float_seq)."
        )
    columns = {}  # \r\n line ends are read as \n ones (pyarrow's reader)
    for position, column in enumerate(header.rstrip("\r\n").split(separator), 1):
        name, colon, kind = column.partition(":")
        if not colon or ":" in kind or not name.strip():
            raise ColdStartError(
                f"{_where(path, 1)}: header column {position} is {column!r}; expected name:type with type one of "
                f"{', '.join(TYPES)} (columns separated by field_separator {separator!r})."
            )
        if kind not in TYPES:
            raise ColdStartError(
                f"{_where(path, 1)}: column {name!r} has type {kind!r}; expected one of {', '.join(TYPES)}."
            )
        if name in columns:
            raise ColdStartError(f"{_where(path, 1)}: column {name!r} appears twice in the header.")
        columns[name] = kind
    return columns


def _check_text(path, encoding):
    """Every line is ``encoding`` text: pyarrow's error for undecodable text names no line."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        data.decode(encoding)
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ColdStartError(
            f"{_where(path, line)}: not {encoding} text ({error.reason} at byte "
            f"0x{data[error.start]:02x}); save the file as {encoding}."
        ) from None


def count_rows(path, separator, n_columns, encoding):
    """Number of data rows (non-blank lines after the header). Raises on text that is not ``encoding`` and on
    the first line with another column count than the header, saying how many lines are malformed in all."""
    _check_text(path, encoding)
    names = [str(k) for k in range(n_columns)]
    first = {"0": pa.binary()}  # bytes: the cheapest column to convert (the text is checked above)
    try:  # no Python row handler on pyarrow's threads: one freed there during the exit aborts the process
        return read_table(path, separator, encoding, first, column_names=names).num_rows
    except pa.ArrowInvalid:
        numbered = []  # a line with another column count: a second, single-threaded read numbers the lines
        read_table(path, separator, encoding, first, column_names=names, bad_rows=numbered, threads=False)
        if not numbered:
            raise
    number, count = min(numbered)
    more = len(numbered) - 1
    raise ColdStartError(
        f"{_where(path, AtomicFile(path, {}, 0).line_of_row(number - 2))}: {count} column(s), expected "
        f"{n_columns} as in the header (field_separator {separator!r})"
        + (f"; {more} more line(s) like it" if more else "")
        + "."
    )


def scan(path, separator="\t", encoding="utf-8"):
    """Header and line structure of one atomic file."""
    columns = read_header(path, separator, encoding)
    return AtomicFile(str(path), columns, count_rows(path, separator, len(columns), encoding))


def read_columns(atomic, names, separator, encoding, seq_separator, store):
    """Table of the named columns, one row per data line, no NaN
    filling (``fast_load.parse_columns``). Token columns come as ``Categorical`` (one string per distinct id,
    not per line: 10^7 likes took 28 s and 1.7 GB as text), token_seq columns as a bool per line: whether the
    cell has a token with a non-blank character; float and float_seq columns as text. The token columns are
    kept in ``store`` for the dataset (``fast_load.read_feat_columns``)."""
    kinds = {f"{name}:{kind}": kind for name, kind in atomic.columns.items() if name in names}
    parsed = parse_columns(atomic.path, separator, seq_separator, kinds, encoding)
    identity = file_identity(atomic.path, separator, seq_separator)
    frame = {}
    for header, kind in kinds.items():
        name, column = header.rpartition(":")[0], parsed[header]
        if kind == "token":
            frame[name] = pd.Categorical.from_codes(column[0], pd.Index(column[1], dtype=object), validate=False)
        elif kind == "token_seq":
            frame[name] = column.counts > 0
            blank = pd.Series(column.vocabulary, dtype=object).str.strip().eq("").to_numpy()
            if blank.any():  # tokens of spaces only (seq_separator is not a space)
                rows = np.repeat(np.arange(len(column.counts)), column.counts)
                frame[name] = np.bincount(rows[~blank[column.codes]], minlength=len(column.counts)) > 0
        else:
            frame[name] = column.to_pandas()
        if kind in ("token", "token_seq"):
            store[identity + (header,)] = column
    return pd.DataFrame(frame)


def quote_problem(atomic, separator, encoding, detail):
    """RecBole's CSV reader treats a field that starts with a double quote as quoted: it runs over line
    ends up to the next quote, so lines merge and the values shift."""
    with open(atomic.path, encoding=encoding) as handle:
        rows = ((n, line.split(separator)) for n, line in enumerate(handle, 1) if n > 1)
        first = next((n for n, cells in rows if any(cell.startswith('"') for cell in cells)), None)
    where = f" (first at line {first})" if first else ""
    return (
        f"{atomic.path}: {atomic.n_rows} data lines, but {detail}: a field that starts "
        f'with a double quote (") is read as quoted text running over line ends{where}; remove the quote or '
        "close it in the same field."
    )


def _examples(atomic, rows, values=None):
    rows = np.asarray(rows)
    lines = atomic.line_of_row(rows[:SHOWN])
    if values is None:
        return ", ".join(f"line {line}" for line in lines)
    return ", ".join(f"line {line}: {str(value)!r}" for line, value in zip(lines, list(values)[:SHOWN]))


def check_float_column(atomic, name, values, report=None):
    """Every cell a finite number: RecBole would fill empty and NaN cells with the column mean. With a
    ``report`` (feature columns of .item/.user files, where a value may be missing) empty cells are a
    warning instead."""
    text = values.str.strip()
    parsed = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    empty = (text == "").to_numpy()
    if empty.any():
        rows = np.flatnonzero(empty)
        where = f"{atomic.path}: column {name!r} is empty on {len(rows)} line(s) ({_examples(atomic, rows)}); "
        if report is None:
            raise ColdStartError(where + "expected a number on every line (RecBole would put the column mean there).")
        report.warnings.append(where + "RecBole fills them with the column mean.")
        parsed[empty] = 0.0
    bad = ~np.isfinite(parsed)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise ColdStartError(
            f"{atomic.path}: column {name!r} has {len(rows)} value(s) that are not finite numbers "
            f"({_examples(atomic, rows, text.to_numpy()[rows])}); expected a number on every line."
        )
    return parsed


def check_float_seq_column(atomic, name, values, seq_separator):
    """Every entry a finite number (RecBole would read a bad one as NaN)."""
    tokens = values.str.split(seq_separator).explode()
    tokens = tokens[tokens.str.strip() != ""]
    parsed = pd.to_numeric(tokens, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(parsed)
    if bad.any():
        rows = tokens.index.to_numpy()[bad]
        raise ColdStartError(
            f"{atomic.path}: column {name!r} (float_seq) has {int(bad.sum())} entries that are not "
            f"finite numbers ({_examples(atomic, rows, tokens.to_numpy()[bad])})."
        )


def codes_of(values):
    """(code per row, distinct values) of a text or ``Categorical`` column."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return values.cat.codes.to_numpy().astype(np.int64), np.asarray(values.cat.categories, dtype=object)
    codes, uniques = pd.factorize(values.to_numpy())
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def check_ids(atomic, name, values, unique, report=None):
    """No empty id; with ``unique`` (an .item or .user file) no id on two lines; with a ``report``, a warning
    for ids with spaces around them ('u1 ' is another id than 'u1')."""
    codes, distinct = codes_of(values)
    text = pd.Series(distinct, dtype=object).astype(str)
    stripped = text.str.strip()
    empty = (stripped == "").to_numpy()[codes]
    if empty.any():
        rows = np.flatnonzero(empty)
        raise ColdStartError(
            f"{atomic.path}: the id column {name!r} is empty on {len(rows)} line(s) "
            f"({_examples(atomic, rows)}); expected an id on every line."
        )
    padded = (stripped != text).to_numpy()
    if report is not None and padded.any():
        rows = np.flatnonzero(padded[codes])
        report.warnings.append(
            f"{atomic.path}: {len(rows)} line(s) have a {name} with spaces around it "
            f"({_examples(atomic, rows, distinct[codes[rows]])}); each is an id of its own "
            f"({str(distinct[codes[rows[0]]])!r} is not {str(distinct[codes[rows[0]]]).strip()!r}): "
            "remove the spaces."
        )
    if unique:
        lines = np.bincount(codes, minlength=len(distinct))
        repeated = lines[codes] > 1
        if repeated.any():
            rows = np.flatnonzero(repeated)
            first = distinct[codes[rows[0]]]
            same = rows[codes[rows] == codes[rows[0]]]
            raise ColdStartError(
                f"{atomic.path}: {name} {first!r} is on {len(same)} lines ({_examples(atomic, same)}); "
                f"{int((lines > 1).sum())} id(s) repeat in all. Expected one line per {name} "
                "(RecBole would keep one of them silently)."
            )


@dataclass
class DatasetReport:
    """What the checks found that is not an error: warnings for the log, with counts."""

    warnings: list = field(default_factory=list)
    # the token columns the checks parsed, for the dataset to take over (``fast_load.read_feat_columns``)
    parsed: dict = field(default_factory=dict)


def check_dataset(config, reads_own_features=False):
    """Check the dataset's atomic files against the settings (``config``, a mapping of RecBole's settings);
    return a ``DatasetReport`` of warnings."""
    report = DatasetReport()
    columns = LoadedColumns(config)
    encoding = config["encoding"] or "utf-8"
    suffixes = ["inter"] + [
        s
        for s in ("user", "item")
        if os.path.isfile(columns.path_of(s)) and (columns.load_col is None or s in columns.load_col)
    ]
    files = {s: scan(columns.path_of(s), config["field_separator"], encoding) for s in suffixes}
    _check_id_columns(config, files, columns)
    _check_seq_len_and_threshold(config, files, columns)
    tables = {
        suffix: _read_and_check(config, suffix, atomic, columns(suffix, atomic), reads_own_features, report)
        for suffix, atomic in files.items()
        if columns(suffix, atomic)
    }
    _check_rows_of_ids(config, files, tables, report)
    if reads_own_features and "item" in tables:
        _check_features(config, files["item"], tables["item"], columns("item", files["item"]), config["seq_separator"])
    return report


class LoadedColumns:
    """The columns RecBole will load from each atomic file (``load_col`` / ``unload_col``)."""

    def __init__(self, config):
        self.name, self.folder = config["dataset"], config["data_path"]
        self.load_col, self.unload_col = config["load_col"], config["unload_col"] or {}

    def path_of(self, suffix):
        return os.path.join(self.folder, f"{self.name}.{suffix}")

    def __call__(self, suffix, atomic):
        columns = (
            list(atomic.columns)
            if self.load_col is None
            else [c for c in self.load_col.get(suffix, []) if c in atomic.columns]
        )
        return [c for c in columns if c not in self.unload_col.get(suffix, [])]


def _check_id_columns(config, files, columns):
    """The user and item id columns: present, loaded, of type token (RecBole needs them to join the files)."""
    uid, iid = config["USER_ID_FIELD"], config["ITEM_ID_FIELD"]
    for suffix, id_field, role in (
        ("inter", uid, "USER_ID_FIELD"),
        ("inter", iid, "ITEM_ID_FIELD"),
        ("item", iid, "ITEM_ID_FIELD"),
        ("user", uid, "USER_ID_FIELD"),
    ):
        atomic = files.get(suffix)
        loaded = columns(suffix, atomic) if atomic else []
        if suffix != "inter" and (not loaded or id_field in loaded):
            continue  # RecBole fails on a file loaded without its id ("iid_field must be loaded ...")
        why = "RecBole needs it" if suffix == "inter" else f"the {suffix} rows are joined to the interactions by it"
        if id_field not in atomic.columns:
            raise ColdStartError(
                f"{atomic.path}: no column {id_field!r} ({role}); {why}; its header has {list(atomic.columns)}."
            )
        if id_field in columns.unload_col.get(suffix, []):
            raise ColdStartError(f"unload_col.{suffix} names {id_field!r} ({role}); {why}: keep it loaded.")
        if id_field not in loaded:
            raise ColdStartError(
                f"load_col.{suffix} {columns.load_col.get(suffix)} lacks {id_field!r} ({role}); {why}: add it."
            )
        if atomic.columns[id_field] != "token":
            raise ColdStartError(
                f"{atomic.path}: column {id_field!r} ({role}) has type {atomic.columns[id_field]}; expected token."
            )


def _check_seq_len_and_threshold(config, files, columns):
    """``seq_len`` names loaded sequence columns (RecBole ignores others: the sequences stay whole); the
    file has interactions; ``threshold`` names a loaded float column."""
    inter = files["inter"]
    sequences = sorted(
        {
            c
            for suffix, atomic in files.items()
            for c in columns(suffix, atomic)
            if atomic.columns[c] in ("token_seq", "float_seq")
        }
    )
    unknown = [f for f in config["seq_len"] or {} if f not in sequences]
    if unknown:
        raise ColdStartError(
            f"seq_len names {unknown}, not a loaded token_seq or float_seq column (loaded: "
            f"{sequences}){suggestion(unknown[0], sequences) or '.'}"
        )
    if inter.n_rows == 0:
        raise ColdStartError(f"{inter.path}: no interactions (only a header).")
    for column in config["threshold"] or {}:
        if column not in inter.columns or column not in columns("inter", inter):
            raise ColdStartError(
                f"threshold names column {column!r}, which is not a loaded column of {inter.path} "
                f"(loaded: {columns('inter', inter)}); expected a float column such as rating."
            )
        if inter.columns[column] != "float":
            raise ColdStartError(
                f"threshold names column {column!r} of {inter.path}, of type "
                f"{inter.columns[column]}; expected a float column."
            )


def _read_and_check(config, suffix, atomic, loaded, reads_own_features, report):
    """Read the columns of one file that the checks need (ids, numbers, sequences; item tokens for the models
    that read features) and check each; returns them as a table."""
    uid, iid = config["USER_ID_FIELD"], config["ITEM_ID_FIELD"]
    separator, seq_separator = config["field_separator"], config["seq_separator"]
    encoding = config["encoding"] or "utf-8"
    ids = {"inter": [uid, iid], "item": [iid], "user": [uid]}[suffix]
    wanted = [
        c
        for c in loaded
        if c in ids
        or atomic.columns[c] in ("float", "float_seq", "token_seq")
        or (suffix == "item" and reads_own_features and atomic.columns[c] == "token")
    ]
    try:
        table = read_columns(atomic, wanted, separator, encoding, seq_separator, report.parsed)
    except pa.ArrowInvalid:
        raise ColdStartError(
            quote_problem(atomic, separator, encoding, "a CSV reader cannot split it into rows")
        ) from None
    if len(table) != atomic.n_rows:
        raise ColdStartError(quote_problem(atomic, separator, encoding, f"a CSV reader sees {len(table)} rows"))
    for column in wanted:
        kind = atomic.columns[column]
        if column in ids:
            check_ids(atomic, column, table[column], unique=suffix != "inter", report=report)
        elif kind == "float":
            check_float_column(atomic, column, table[column], None if suffix == "inter" else report)
        elif kind == "float_seq":
            check_float_seq_column(atomic, column, table[column], seq_separator)
    return table


def _check_rows_of_ids(config, files, tables, report):
    """RecBole's filter (``filter_inter_by_user_or_item``) drops the interactions whose user or item has no row
    in the .user / .item file: a warning with counts (no silent loss), an error when every one would go."""
    inter = files["inter"]
    for suffix, id_field in (("item", config["ITEM_ID_FIELD"]), ("user", config["USER_ID_FIELD"])):
        if not config["filter_inter_by_user_or_item"] or suffix not in tables or id_field not in tables[suffix]:
            continue
        codes, distinct = codes_of(tables["inter"][id_field])
        missing = (pd.Index(codes_of(tables[suffix][id_field])[1]).get_indexer(distinct) < 0)[codes]
        if missing.all():
            raise ColdStartError(
                f"no {suffix} of {inter.path} has a row in {files[suffix].path}: every interaction "
                f"would be dropped (filter_inter_by_user_or_item); check the {id_field} values."
            )
        if missing.any():
            shown = ", ".join(map(repr, distinct[pd.unique(codes[missing])[:SHOWN]]))
            report.warnings.append(
                f"{len(np.unique(codes[missing]))} {suffix}(s) of {inter.path} ({shown}, ...) have no row in "
                f"{files[suffix].path}: their {int(missing.sum())} interaction(s) of {len(missing)} "
                f"({100.0 * missing.mean():.1f}%) are dropped (filter_inter_by_user_or_item: True)."
            )


def _check_features(config, atomic, table, loaded_columns, seq_separator):
    """At least one feature token: a model that scores items by their features has nothing else."""
    fields = config["feature_fields"]
    if fields is None:  # ~: every token field
        fields = [
            c for c in loaded_columns if c != config["ITEM_ID_FIELD"] and atomic.columns[c] in ("token", "token_seq")
        ]
    fields = [f for f in fields if f in table]
    if not fields:
        return
    has = np.zeros(len(table), dtype=bool)
    for column in fields:
        if table[column].dtype == bool:  # read_columns' answer for a token_seq column read from the bytes
            has |= table[column].to_numpy()
            continue
        cells = table[column].str.replace(seq_separator, "", regex=False).str.strip()
        has |= (cells != "").to_numpy()
    if not has.any():
        raise ColdStartError(
            f"{atomic.path}: the feature field(s) {fields} are empty for every item; expected item "
            f"features (tokens) for {config['model']}, which scores items by them."
        )
