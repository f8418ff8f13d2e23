"""pyarrow's multi-threaded CSV reader: the one reader of atomic files, for their checks and for the dataset.

RecBole's ``Dataset._load_feat`` makes a Python string per token cell and splits every ``token_seq`` cell in
Python (about 50 s and gigabytes of short-lived objects at 10^7 likes). Here token columns become
``pandas.Categorical`` with sorted categories and ``token_seq`` columns integer codes into a sorted vocabulary,
which ``ColdStartDataset`` sorts, filters and numbers by code. An empty token cell is missing, but ``NA``,
``null``, ``nan`` or ``None`` are tokens (RecBole took them for missing: an item called ``NA`` lost its
interactions). As pandas reads a file, a field that starts with a double quote is quoted and ``\\r\\n`` or ``\\r``
ends a line; a separator of several characters is split on as written (pandas took it for a regular expression).
"""

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pv

# what is read ends in numpy arrays: the system allocator returns the blocks pyarrow frees at once, where mimalloc
# (pyarrow's default) kept them (at 10^6 likes the load's peak: 765 MiB against 683)
pa.set_memory_pool(pa.system_memory_pool())
SCAN_BYTES = 1 << 24
POWERS_OF_TEN = 10 ** np.arange(19, dtype=np.int64)


def holds(path, byte):
    """Whether ``byte`` is somewhere in the file, read a block at a time."""
    with open(path, "rb") as handle:
        return any(byte in block for block in iter(lambda: handle.read(SCAN_BYTES), b""))


def read_table(path, separator, encoding, types, column_names=None, quoted=False, bad_rows=None, threads=True):
    """The columns ``types`` ({header column: pyarrow type}) of an atomic file, one row per non-blank line.

    ``column_names`` replaces the header's names (the header line is then skipped). ``quoted``: a field that
    starts with a double quote is quoted text and may run over line ends (pandas' reading); otherwise quotes
    are text. ``bad_rows`` (a list) gets (row number, column count) of every line with another column count
    than the header, which is skipped (the number counts non-blank lines from 1, the header's; None with
    ``threads``); without it such a line raises ``pyarrow.ArrowInvalid``."""

    def skip(row):
        bad_rows.append((row.number, row.actual_columns))
        return "skip"

    source = path
    if len(separator) > 1:  # pyarrow splits on one character: one the file does not hold stands for the separator
        with open(path, "rb") as handle:
            data = handle.read()
        stand_in = next(c for c in "\x1f\x1e\x1d\x1c\x01\x02" if c.encode() not in data)
        source = pa.BufferReader(data.replace(separator.encode(encoding or "utf8"), stand_in.encode()))
        separator = stand_in
    return pv.read_csv(
        source,
        read_options=pv.ReadOptions(
            encoding=encoding or "utf8",
            use_threads=threads,
            column_names=column_names,
            skip_rows=1 if column_names else 0,
        ),
        parse_options=pv.ParseOptions(
            delimiter=separator,
            quote_char='"' if quoted else False,
            newlines_in_values=quoted,
            invalid_row_handler=None if bad_rows is None else skip,
        ),
        convert_options=pv.ConvertOptions(column_types=types, include_columns=list(types), strings_can_be_null=False),
    )


def token_codes(column, decimal=True):
    """(int32 code per row, sorted distinct texts as an object array) of a text column; the codes index the
    sorted texts (byte order: the order of Python's ``sorted`` on the texts). Every text is hashed once (one
    dictionary for all blocks), or, with ``decimal``, not at all when every cell is a plain decimal number
    (``_decimal_codes``: ids mostly are; a vocabulary's few distinct words hash faster than numbers parse)."""
    coded = _decimal_codes(column) if decimal else None
    if coded is not None:
        return coded
    encoded = pc.dictionary_encode(column)  # a chunked column: one dictionary shared by every block
    dictionary = encoded.chunk(0).dictionary if encoded.num_chunks else pa.array([], pa.string())
    order = pc.sort_indices(dictionary).to_numpy()
    rank = _ranks(order)
    codes = [rank[block.indices.to_numpy()] for block in encoded.chunks]
    codes = np.concatenate(codes) if codes else np.zeros(0, dtype=np.int32)
    return codes, dictionary.take(order).to_numpy(zero_copy_only=False).astype(object)


def _decimal_codes(column):
    """``token_codes`` of a column whose every cell is a decimal number as Python writes an int (no sign,
    space or leading zero; at most 17 digits), else None. Ids mostly are: at 10^7 likes a column of numbers
    takes 1 s where texts take 6. Numbers sort as their texts do by (the number followed by zeros up to 17
    digits, its length): '12' < '123' < '2'."""
    try:
        values = pc.cast(column, pa.int64()).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    digits = np.maximum(np.searchsorted(POWERS_OF_TEN, values, side="right"), 1)
    if not len(values) or digits.max() > 17 or not np.array_equal(digits, pc.binary_length(column).to_numpy()):
        return None  # a sign, a space, a leading zero or a longer number: read as text
    if values.max() < 4 * len(values):  # ids numbered from about 0: a table of the numbers, no hashing
        present = np.zeros(values.max() + 1, dtype=bool)
        present[values] = True
        distinct = np.flatnonzero(present)
        codes = (np.cumsum(present) - 1)[values]
    else:
        codes, distinct = pd.factorize(values)
    digits = np.maximum(np.searchsorted(POWERS_OF_TEN, distinct, side="right"), 1)
    order = np.argsort(distinct * POWERS_OF_TEN[17 - digits] * 20 + digits)
    texts = pc.cast(pa.array(distinct[order]), pa.string()).to_numpy(zero_copy_only=False)
    return _ranks(order)[codes], texts.astype(object)


def _ranks(order):
    """Each value's place in the sorted order (int32), from ``order`` (the argsort)."""
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return rank


@dataclass
class CodedSequences:
    """A ``token_seq`` column as integer codes: every row's codes one after the other (int32, into
    ``vocabulary``, sorted text) and the tokens per row; the form ``ColdStartDataset._remap`` numbers."""

    codes: np.ndarray
    counts: np.ndarray
    vocabulary: np.ndarray

    def take(self, rows):
        """The sequences of ``rows`` (an index array), in that order."""
        starts = np.cumsum(self.counts) - self.counts
        counts = self.counts[rows]
        offsets = np.repeat(starts[rows] - (np.cumsum(counts) - counts), counts)
        return CodedSequences(self.codes[offsets + np.arange(len(offsets))], counts, self.vocabulary)

    @property
    def column(self):
        """One int32 array of codes per row (an object column, RecBole's form of a ``token_seq`` field)."""
        return split_rows(self.codes, self.counts)


def _split_cells(cells, seq_separator, trim=False):
    """(the non-empty tokens of ``cells`` split as RecBole splits a cell, ``str.split(seq_separator)``; tokens
    per cell). ``trim``: spaces around a token are dropped first (numbers: Python's ``float`` ignores them)."""
    lists = pc.split_pattern(cells, seq_separator)
    flat = pc.list_flatten(lists)
    flat = pc.utf8_trim_whitespace(flat) if trim else flat
    filled = pc.not_equal(flat, "")
    if pc.all(filled).as_py() is not False:  # no empty token (the common case): nothing to drop
        return flat, pc.list_value_length(lists).to_numpy().astype(np.int64)
    return flat.filter(filled), np.bincount(
        pc.list_parent_indices(lists).filter(filled).to_numpy(), minlength=len(cells)
    )


def split_tokens(cells, seq_separator):
    """``CodedSequences`` of a text column split as RecBole splits a cell, one dictionary over all the tokens
    (a block's codes, not its texts, kept)."""
    parts = [_split_cells(chunk, seq_separator) for chunk in cells.chunks]
    codes, vocabulary = token_codes(pa.chunked_array([t for t, _ in parts], pa.string()), decimal=False)
    counts = np.concatenate([c for _, c in parts]) if parts else np.zeros(0, dtype=np.int64)
    return CodedSequences(codes, counts, vocabulary)


def _numbers(cells):
    """float64 of a text column, spaces around a number ignored and an empty cell NaN (RecBole's mean fills it)."""
    text = pc.utf8_trim_whitespace(cells)
    return pc.cast(pc.if_else(pc.equal(text, ""), None, text), pa.float64()).to_numpy(zero_copy_only=False)


def file_identity(path, separator, seq_separator):
    """What a parsed column is stored under between the checks and the dataset (the file unchanged since)."""
    stat = os.stat(path)
    return (os.path.realpath(path), stat.st_size, stat.st_mtime_ns, separator, seq_separator)


def parse_columns(path, separator, seq_separator, kinds, encoding):
    """{header column: column} of the columns ``kinds`` ({header column: type}) of an atomic file: token columns
    (int32 code per row, sorted texts: ``token_codes``), ``token_seq`` columns ``CodedSequences``, float and
    float_seq columns pyarrow text. In a file with a double quote, a field that starts with one is quoted."""
    types = dict.fromkeys(kinds, pa.string())
    table = read_table(path, separator, encoding, types, quoted=holds(path, b'"'))
    parse = {"token": token_codes, "token_seq": lambda cells: split_tokens(cells, seq_separator)}
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # pyarrow and numpy let go of the GIL: columns at once
        parsed = {
            header: pool.submit(parse.get(kind, lambda cells: cells), table.column(header))
            for header, kind in kinds.items()
        }
    return {header: future.result() for header, future in parsed.items()}


def read_feat_columns(path, separator, seq_separator, kinds, encoding, store=None):
    """``parse_columns`` of an atomic file that its checks passed, as RecBole reads it: token columns
    ``Categorical`` (sorted categories; an empty cell missing), float columns float64, ``token_seq`` columns
    ``CodedSequences``, ``float_seq`` columns one float64 array per row. ``store`` (a dict) holds the token
    columns the files' checks parsed (``atomic_files.read_columns``): an entry for this file (unchanged since)
    is used and removed, so that each file is parsed once."""
    identity = file_identity(path, separator, seq_separator)
    store = {} if store is None else store
    parsed = {h: store.pop(identity + (h,)) for h in kinds if identity + (h,) in store}
    unparsed = {h: kind for h, kind in kinds.items() if h not in parsed}
    parsed.update(parse_columns(path, separator, seq_separator, unparsed, encoding) if unparsed else {})
    for header, kind in kinds.items():
        if kind == "token":
            codes, vocabulary = parsed[header]
            if len(vocabulary) and vocabulary[0] == "":  # an empty cell is missing; sorted, it comes first
                codes, vocabulary = codes - 1, vocabulary[1:]
            parsed[header] = pd.Categorical.from_codes(codes, pd.Index(vocabulary, dtype=object), validate=False)
        elif kind == "float":
            parsed[header] = _numbers(parsed[header])
        elif kind == "float_seq":
            numbers, counts = _split_cells(parsed[header], seq_separator, trim=True)
            parsed[header] = split_rows(_numbers(numbers), counts)
    return parsed


def split_rows(flat, lengths):
    """``np.split(flat, np.cumsum(lengths)[:-1])`` as an object column: one view per row (``np.split`` is
    5x slower)."""
    ends = np.cumsum(lengths)
    column = np.empty(len(lengths), dtype=object)
    column[:] = [flat[a:b] for a, b in zip((ends - lengths).tolist(), ends.tolist())]
    return column


def _positions(values):
    """(length of each array of ``values``, their values one after the other, each value's place in its row)."""
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    flat = np.concatenate(values) if len(values) else np.zeros(0, dtype=np.int64)
    return lengths, flat, np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def pad_sequences(values, width_limit, dtype):
    """RecBole's ``pad_sequence([tensor(d[:width_limit]) for d in values], batch_first=True)`` as one numpy
    scatter: (rows x longest kept length) array of ``dtype``, zero padded."""
    lengths, flat, position = _positions(values)
    keep = position < width_limit
    width = int(np.minimum(lengths, width_limit).max()) if len(values) else 0
    padded = np.zeros((len(values), width), dtype=dtype)
    padded[np.repeat(np.arange(len(values)), lengths)[keep], position[keep]] = flat[keep]
    return padded


def sequence_rows(values, width_limit):
    """What ``pad_sequences(values, width_limit, int64)`` holds, without the padding: (indptr int64, indices
    int32) of a CSR layout, the first ``width_limit`` tokens of every row in order, padding ids 0 left out
    (a padded row of 1,231 int64 slots for 16 distinct words on citeulike-t: 240 MiB against 3 MiB)."""
    lengths, flat, position = _positions(values)
    keep = (position < width_limit) & (flat != 0)
    rows = np.repeat(np.arange(len(values)), lengths)[keep]
    indptr = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=len(values)), out=indptr[1:])
    indices = flat[keep]
    return indptr, indices.astype(np.int32 if not len(indices) or indices.max() < 2**31 else np.int64)
