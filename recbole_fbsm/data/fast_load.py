"""RecBole's reading of an atomic file, without its per-cell Python work.

RecBole's ``Dataset._load_feat`` reads with pandas' Python parser (about 300,000 lines a second), makes a
new Python string for every token cell, and splits every ``token_seq`` cell in Python into a numpy array
of fixed-width text: at 10^7 likes and 2 million items that is about 50 s of reading and gigabytes of
short-lived objects, paid again (about 90 s more) when those strings are sorted, filtered and numbered.

``read_plain_columns`` reads the same columns from the file's bytes with numpy instead: the cells and
tokens of a column are packed into integers and factorised, and only the distinct ones are decoded.
Token columns become ``pandas.Categorical`` (sorted categories: ``ColdStartDataset`` sorts, filters and
numbers them by code), ``token_seq`` columns integer codes per row into a sorted vocabulary. Token cells
are text: an empty cell is missing, but ``NA``, ``null``, ``nan`` or ``None`` are tokens of those names
(RecBole's reader, pandas with its default NA strings, took them for missing: an item called ``NA`` lost
its interactions); runs of separators and empty tokens behave exactly as in RecBole. Files another parser
could read differently (a double quote or a carriage return anywhere, a separator longer than one
character, rows with another column count, very long tokens) are left to the pandas reader
(``ColdStartDataset._recbole_read``).
"""

import codecs
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

SCAN_BYTES = 1 << 24


def plain_file(path, separator):
    """True when pandas' C parser reads ``path`` as RecBole's Python-engine reading does: a one-character
    separator and no double quote (quoted fields) nor carriage return anywhere in the file."""
    if len(separator) != 1 or separator in '"\r\n':
        return False
    with open(path, "rb") as handle:
        while True:
            block = handle.read(SCAN_BYTES)
            if not block:
                return True
            if b'"' in block or b"\r" in block:
                return False


MAX_TOKEN_BYTES = 64  # longer tokens: the file is left to pandas
WINDOW_PADDING = 8  # zero bytes after a parsed body: an 8-byte window starts at any of its offsets


@dataclass
class CodedSequences:
    """A ``token_seq`` column as integer codes: ``column`` holds one int64 array per row (codes into
    ``vocabulary``, sorted text), the form ``ColdStartDataset._remap`` numbers without text."""

    column: np.ndarray
    vocabulary: np.ndarray
    codes: np.ndarray = None  # every row's codes, one after the other
    counts: np.ndarray = None  # tokens per row


# longer than 60 lines: one pass that parses every loaded column from the file's bytes, sharing the row
# boundaries; each column kind is one short branch
def read_plain_columns(
    path, separator, seq_separator, usecols, columns, kinds, encoding, missing=True, store=None, keep=False
):
    """The loaded columns of a plain atomic file (see ``plain_file``) as RecBole would read them, or None
    when the file needs pandas (rows with another column count, a token longer than ``MAX_TOKEN_BYTES``,
    a NUL byte, a float pandas' C parser refuses, an encoding other than UTF-8).

    Returns (DataFrame, {name: CodedSequences}): token columns are ``pandas.Categorical`` with sorted
    categories (empty cells: NaN; ``NA`` or ``null`` are tokens), float columns float64 (pandas' C parser:
    the same values as RecBole's Python-engine reading), ``token_seq`` columns coded (a placeholder column in
    the frame).
    ``missing=False`` keeps empty cells of token columns as text (for the files' checks).
    ``store`` (a dict) holds parsed token columns between calls: an entry for this file (unchanged since)
    is used and removed, and with ``keep`` the columns parsed here are left in it (the checks keep them
    for the dataset: each file is parsed once)."""
    if (
        codecs.lookup(encoding or "utf-8").name != "utf-8"
        or len(seq_separator) != 1
        or ord(seq_separator) >= 128
        or seq_separator in (separator, "\n")
    ):
        return None
    stat = os.stat(path)
    identity = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns, separator, seq_separator)
    stored = {} if store is None else store
    wanted = [c for c in usecols if kinds[c] in ("token", "token_seq")]
    parsed = {c: _widened(stored.pop(identity + (c,))) for c in wanted if identity + (c,) in stored}
    n_rows = next((entry[-1] for entry in parsed.values()), None)
    if len(parsed) < len(wanted):
        layout = _parse_layout(path, separator, encoding)
        if layout is None:
            return None
        header, data, line_starts, line_ends, cuts = layout
        n_rows = len(line_starts)
        for column in wanted:
            if column in parsed:
                continue
            position = header.index(column)
            starts = line_starts if position == 0 else cuts[:, position - 1] + 1
            ends = line_ends if position == len(header) - 1 else cuts[:, position]
            if kinds[column] == "token":
                tokens = _tokens(data, starts, ends - starts)
                parsed[column] = None if tokens is None else tokens + (n_rows,)
            else:
                parsed[column] = _token_seq_spans(data, starts, ends, seq_separator)
            if parsed[column] is None:
                return None
        del layout, data, line_starts, line_ends, cuts
    if store is not None and keep:
        for column, entry in parsed.items():
            store[identity + (column,)] = _narrowed(entry)
    frame, coded = {}, {}
    floats = [c for c in usecols if kinds[c] == "float"]
    if floats:
        try:
            numbers = pd.read_csv(
                path, delimiter=separator, usecols=floats, dtype=np.float64, encoding=encoding, engine="c"
            )
        except ValueError:
            return None
        if n_rows is None:
            n_rows = len(numbers)
        if len(numbers) != n_rows:
            return None
    for column, name in zip(usecols, columns):
        kind = kinds[column]
        if kind == "float":
            frame[name] = numbers[column].to_numpy()
        elif kind == "token":
            codes, vocabulary, _ = parsed[column]
            absent = pd.Index(vocabulary).isin([""]) if missing else np.zeros(len(vocabulary), dtype=bool)
            keep = np.flatnonzero(~absent)
            remap = np.full(len(vocabulary), -1, dtype=np.int64)
            remap[keep] = np.arange(len(keep))
            frame[name] = pd.Categorical.from_codes(
                remap[codes], categories=pd.Index(vocabulary[keep], dtype=object), validate=False
            )
        elif kind == "token_seq":
            coded[name] = _coded_sequences(*parsed[column])
            frame[name] = coded[name].column
        else:
            return None  # float_seq: RecBole's own parsing
    return pd.DataFrame(frame), coded


def _narrowed(entry):
    """A parsed column with its integer arrays as int32 while it waits in a store (half the memory)."""
    return tuple(
        part.astype(np.int32) if isinstance(part, np.ndarray) and part.dtype == np.int64 else part for part in entry
    )


def _widened(entry):
    return tuple(
        part.astype(np.int64) if isinstance(part, np.ndarray) and part.dtype == np.int32 else part for part in entry
    )


def _parse_layout(path, separator, encoding):
    """(header, the body's bytes as uint8, start and end of every non-blank line, the field separators'
    positions as a lines x (columns - 1) array), or None when a line has another column count.

    The file is read straight into a numpy buffer (no bytes object beside it) with ``WINDOW_PADDING`` zero
    bytes after the body, which ``_tokens`` reads its 8-byte windows through without copying the body."""
    size = os.path.getsize(path)
    buffer = np.zeros(size + 1 + WINDOW_PADDING, dtype=np.uint8)
    with open(path, "rb") as handle:
        read = handle.readinto(memoryview(buffer)[:size])
    if read and buffer[read - 1] != 10:
        buffer[read] = 10  # a last line without its newline
        read += 1
    newlines = np.flatnonzero(buffer[:read] == 10)
    if not len(newlines):
        return None
    head_end = int(newlines[0])
    header = buffer[:head_end].tobytes().decode(encoding or "utf-8").split(separator)
    data = buffer[head_end + 1 : read]
    if not len(data) or (data == 0).any():
        return None
    line_ends = newlines[1:] - (head_end + 1)
    del newlines
    line_starts = np.concatenate(([0], line_ends[:-1] + 1))
    filled = line_ends > line_starts  # both parsers skip blank lines
    field_cuts = np.flatnonzero(data == ord(separator))
    per_line = np.searchsorted(field_cuts, line_ends) - np.searchsorted(field_cuts, line_starts)
    if (per_line[filled] != len(header) - 1).any() or (per_line[~filled] != 0).any():
        return None
    n_rows = int(filled.sum())
    if n_rows == 0:
        return None
    cuts = field_cuts.reshape(n_rows, len(header) - 1)
    return header, data, line_starts[filled], line_ends[filled], cuts


def _token_seq_spans(data, starts, ends, seq_separator):
    """Every cell ``data[start:end]`` split on ``seq_separator``, empty tokens dropped: (code per token,
    row per token, sorted vocabulary, number of rows), or None (a token too long). Token boundaries are the
    separators inside the cells and the cells' ends, found by one pass over the bytes."""
    inside = np.zeros(len(data) + 1, dtype=np.int8)
    inside[starts] += 1
    inside[ends] -= 1
    inside = np.cumsum(inside[:-1], dtype=np.int8).view(bool)  # cells do not overlap: 0 or 1
    boundary = (data == ord(seq_separator)) & inside
    boundary[ends] = True
    del inside
    token_ends = np.flatnonzero(boundary)
    del boundary
    is_end = np.zeros(len(data), dtype=bool)
    is_end[ends] = True
    is_end = is_end[token_ends]
    # the cell (row) of each token; int32 below 2^31 rows (a 10^7-like item file has 32 million tokens)
    rows = np.cumsum(is_end, dtype=np.int32 if len(starts) < 2**31 else np.int64)
    rows -= is_end
    first = np.ones(len(token_ends), dtype=bool)
    first[1:] = is_end[:-1]
    del is_end
    token_starts = np.empty(len(token_ends), dtype=np.int64)
    token_starts[first] = starts[rows[first]]
    token_starts[~first] = token_ends[:-1][~first[1:]] + 1
    del first
    lengths = np.subtract(token_ends, token_starts, out=token_ends)  # the ends are not read again
    keep = lengths > 0
    if not keep.all():  # empty tokens (runs of separators): one array filtered at a time
        token_starts = token_starts[keep]
        lengths = lengths[keep]
        rows = rows[keep]
    del token_ends, keep
    tokens = _tokens(data, token_starts, lengths)
    if tokens is None:
        return None
    return tokens[0], rows, tokens[1], len(starts)


def _coded_sequences(codes, rows, vocabulary, n_rows):
    """``CodedSequences`` of split cells (a cell ``NA`` holds the token ``NA``: cells are text)."""
    counts = np.bincount(rows, minlength=n_rows)
    return CodedSequences(split_rows(codes, counts), vocabulary, codes, counts)


def split_rows(flat, lengths):
    """``np.split(flat, np.cumsum(lengths)[:-1])`` as an object column: one view per row (``np.split`` is
    5x slower)."""
    ends = np.cumsum(lengths)
    column = np.empty(len(lengths), dtype=object)
    column[:] = [flat[a:b] for a, b in zip((ends - lengths).tolist(), ends.tolist())]
    return column


def _tokens(data, starts, lengths):
    """(code of each span, sorted distinct texts) of the byte spans ``data[start:start+length]``, or None
    when a span is longer than ``MAX_TOKEN_BYTES``. Spans are packed into big-endian uint64 words and
    factorised word by word; only the distinct spans are decoded. No token holds a NUL byte (the caller
    refuses them), so a word's value and width are unique to its bytes."""
    if len(starts) == 0:
        return np.zeros(0, dtype=np.int64), np.empty(0, dtype=object)
    longest = int(lengths.max())
    if longest > MAX_TOKEN_BYTES:
        return None
    windows = _windows(data)
    if longest <= 8:
        # one word, left-aligned (the bytes past the token's end cleared): numeric order is byte order,
        # which for UTF-8 is the order of the texts
        key = _word(windows, starts, lengths)
        np.left_shift(key, _unused_bits(lengths), out=key, where=lengths > 0)
        codes, distinct = pd.factorize(key)
        del key
        order = np.argsort(distinct, kind="stable")
        raw = distinct[order].astype(">u8").view("S8")  # numpy drops the trailing zero bytes
        if len(raw) and raw.view(np.uint8).max() < 128:
            texts = raw.astype("U8").astype(object)
        else:
            texts = np.array([text.decode("utf-8") for text in raw.tolist()], dtype=object)
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        return rank[codes], texts
    codes = None
    for word in range(-(-longest // 8)):
        word_starts = np.minimum(starts + 8 * word, len(data))  # past a token's end its width is 0
        word_codes, _ = pd.factorize(_word(windows, word_starts, np.clip(lengths - 8 * word, 0, 8)))
        del word_starts
        codes = word_codes if codes is None else pd.factorize(codes * (int(word_codes.max()) + 1) + word_codes)[0]
    n_distinct = int(codes.max()) + 1
    first = np.empty(n_distinct, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)
    texts = np.array(
        [data[a : a + n].tobytes().decode("utf-8") for a, n in zip(starts[first].tolist(), lengths[first].tolist())],
        dtype=object,
    )
    order = np.argsort(texts.astype(str), kind="stable")
    rank = np.empty(n_distinct, dtype=np.int64)
    rank[order] = np.arange(n_distinct)
    return rank[codes], texts[order]


def _windows(data):
    """(len(data) + 1) x 8 view: the 8 bytes from each offset of ``data``, the last ones reading zeros past its
    end. Without a copy when ``data`` lies in a buffer with ``WINDOW_PADDING`` more bytes, all zero, after it
    (``_parse_layout``'s); otherwise from a padded copy."""
    base = data.base
    if isinstance(base, np.ndarray) and base.dtype == np.uint8 and base.ndim == 1 and data.flags.c_contiguous:
        offset = data.ctypes.data - base.ctypes.data
        tail = base[offset + len(data) : offset + len(data) + WINDOW_PADDING]
        if len(tail) == WINDOW_PADDING and not tail.any():
            return np.lib.stride_tricks.as_strided(data, shape=(len(data) + 1, 8), strides=(1, 1), writeable=False)
    padded = np.concatenate((data, np.zeros(WINDOW_PADDING, dtype=np.uint8)))
    return np.lib.stride_tricks.as_strided(padded, shape=(len(data) + 1, 8), strides=(1, 1), writeable=False)


def _word(windows, starts, widths):
    """The ``widths[k]`` bytes from ``starts[k]`` (at most the windows' last row) as a big-endian number
    (right-aligned; 0 for width 0)."""
    key = windows[starts].view(">u8").ravel()
    key = key.byteswap(inplace=True).view(np.dtype(np.uint64).newbyteorder("="))  # native order, no copy
    key[widths == 0] = 0
    np.right_shift(key, _unused_bits(widths), out=key, where=widths > 0)
    return key


def _unused_bits(widths):
    """8 * (8 - width) per entry as uint8 (shifts of a uint64 key; the ufunc widens them by chunks, where
    int64 temporaries cost 24 bytes per token)."""
    bits = np.subtract(8, widths, dtype=np.uint8, casting="unsafe")
    bits <<= 3
    return bits


def pad_sequences(values, width_limit, dtype):
    """RecBole's ``pad_sequence([tensor(d[:width_limit]) for d in values], batch_first=True)`` as one numpy
    scatter: (rows x longest kept length) array of ``dtype``, zero padded."""
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    flat = np.concatenate(values) if len(values) else np.zeros(0)
    position = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    keep = position < width_limit
    width = int(np.minimum(lengths, width_limit).max()) if len(values) else 0
    padded = np.zeros((len(values), width), dtype=dtype)
    padded[np.repeat(np.arange(len(values)), lengths)[keep], position[keep]] = flat[keep]
    return padded


def sequence_rows(values, width_limit):
    """What ``pad_sequences(values, width_limit, int64)`` holds, without the padding: (indptr int64, indices
    int32) of a CSR layout, the first ``width_limit`` tokens of every row in order, padding ids 0 left out
    (a padded row of 1,231 int64 slots for 16 distinct words on citeulike-t: 240 MiB against 3 MiB)."""
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    flat = np.concatenate(values) if len(values) else np.zeros(0, dtype=np.int64)
    position = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    keep = (position < width_limit) & (flat != 0)
    rows = np.repeat(np.arange(len(values)), lengths)[keep]
    indptr = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=len(values)), out=indptr[1:])
    indices = flat[keep]
    return indptr, indices.astype(np.int32 if not len(indices) or indices.max() < 2**31 else np.int64)
