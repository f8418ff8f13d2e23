"""RecBole's reading of an atomic file, without its per-cell Python work.

RecBole's ``Dataset._load_feat`` reads with pandas' Python parser (about 300,000 lines a second), makes a
new Python string for every token cell, and splits every ``token_seq`` cell in Python into a numpy array
of fixed-width text: at 10^7 likes and 2 million items that is 50 of the 190 seconds of a load and
several gigabytes of short-lived objects, paid again when the tokens are sorted, filtered and numbered.

``read_atomic_columns`` gives the same DataFrame from pandas' C parser: token cells of one column share
one string object per distinct token (read as a categorical, expanded by ``take``), and a ``token_seq``
column is split with numpy on the file's bytes: every row's array holds shared string objects (object
dtype) and is a view into one flat array. Missing cells, the default NA strings (``NA``, ``null``, ...),
empty tokens and ``seq_len`` cuts behave exactly as in RecBole. Files the C parser could read
differently (a double quote or a carriage return anywhere, a separator longer than one character) are
left to RecBole's own reader (``plain_file``).
"""

import numpy as np
import pandas as pd

SCAN_BYTES = 1 << 24
MAX_PACKED_TOKEN_BYTES = 8  # longer tokens are split by Python's str.split instead of packed into an integer


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


def read_atomic_columns(path, separator, usecols, columns, kinds, encoding):
    """RecBole's ``pd.read_csv`` of ``_load_feat`` with the C parser. ``kinds`` maps each header column
    (``name:type``) to token / token_seq / float / float_seq. Token columns come back as object arrays
    of shared strings (NaN where RecBole has NaN), float columns as float64, sequence columns as text
    (NaN where missing); the caller splits the sequences."""
    dtype = {}
    for column in usecols:
        kind = kinds[column]
        dtype[column] = np.float64 if kind == "float" else ("category" if kind == "token" else str)
    frame = pd.read_csv(path, delimiter=separator, usecols=usecols, dtype=dtype, encoding=encoding, engine="c")
    frame.columns = columns
    for column, name in zip(usecols, columns):
        if kinds[column] == "token":
            frame[name] = shared_strings(frame[name])
    return frame


def shared_strings(categorical):
    """An object array with one string object per distinct value (NaN where missing): what RecBole's
    ``dtype=str`` column holds, at 8 bytes a cell instead of a new string per cell."""
    values = categorical.array
    categories = np.asarray(values.categories, dtype=object)
    if len(categories) and pd.api.types.infer_dtype(categories, skipna=False) != "string":
        categories = np.array([str(c) for c in categories], dtype=object)
    codes = values.codes
    result = categories.take(np.maximum(codes, 0)) if len(categories) else np.empty(len(codes), dtype=object)
    result[codes < 0] = np.nan
    return result


def split_token_seq(cells, separator, limit=None):
    """RecBole's ``np.array(list(filter(None, cell.split(separator))))`` for every cell (NaN: no token),
    then the first ``limit`` tokens of each: (list of per-row object arrays of shared strings, views into
    one flat array; the number of tokens of each row before the cut)."""
    cells = pd.Series(cells, dtype=object).fillna("").to_numpy(dtype=object)
    if len(cells) == 0:
        return [], np.zeros(0, dtype=np.int64)
    flat, rows = _tokens_by_bytes(cells, separator)
    if flat is None:
        flat, rows = _tokens_by_python(cells, separator)
    counts = np.bincount(rows, minlength=len(cells)).astype(np.int64)
    if limit is not None:
        position = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        flat = flat[position < limit]
        kept = np.minimum(counts, limit)
    else:
        kept = counts
    return np.split(flat, np.cumsum(kept)[:-1]), counts


def _tokens_by_bytes(cells, separator):
    """(flat object array of the non-empty tokens, row of each), split on the UTF-8 bytes with numpy; or
    (None, None) when the separator is not one ASCII character or a token is longer than
    ``MAX_PACKED_TOKEN_BYTES`` bytes (then tokens cannot be packed into one integer each)."""
    if len(separator) != 1 or ord(separator) >= 128 or separator == "\n":
        return None, None
    data = np.frombuffer("\n".join(cells).encode("utf-8"), dtype=np.uint8)
    if (data == 0).any():  # a NUL byte would be confused with the keys' zero padding
        return None, None
    cut = (data == ord(separator)) | (data == 10)
    cuts = np.flatnonzero(cut)
    starts = np.concatenate(([0], cuts + 1))
    ends = np.concatenate((cuts, [len(data)]))
    line_ends = data[cuts] == 10
    if line_ends.sum() != len(cells) - 1:  # a cell with a line end inside: rows would shift
        return None, None
    row_of_span = np.concatenate(([0], np.cumsum(line_ends)))
    lengths = ends - starts
    keep = lengths > 0
    starts, lengths, rows = starts[keep], lengths[keep], row_of_span[keep]
    if len(lengths) == 0:
        return np.empty(0, dtype=object), rows.astype(np.int64)
    if lengths.max() > MAX_PACKED_TOKEN_BYTES:
        return None, None
    # each token's bytes, big-endian in one uint64 (zero padded): equal tokens give equal keys
    padded = np.concatenate((data, np.zeros(MAX_PACKED_TOKEN_BYTES, dtype=np.uint8)))
    key = np.zeros(len(starts), dtype=np.uint64)
    for offset in range(MAX_PACKED_TOKEN_BYTES):
        byte = padded[starts + offset].astype(np.uint64)
        byte[lengths <= offset] = 0
        key <<= np.uint64(8)
        key |= byte
    codes, unique_keys = pd.factorize(key)
    raw = unique_keys.astype(">u8").tobytes()
    vocabulary = np.array([raw[8 * k:8 * k + 8].rstrip(b"\0").decode("utf-8") for k in range(len(unique_keys))],
                          dtype=object)
    return vocabulary.take(codes), rows.astype(np.int64)


def _tokens_by_python(cells, separator):
    """The same split with Python's ``str.split``, for separators or tokens the byte split does not handle."""
    pieces = [[token for token in cell.split(separator) if token] for cell in cells]
    counts = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
    tokens = [token for piece in pieces for token in piece]
    codes, vocabulary = pd.factorize(np.array(tokens, dtype=object))
    flat = np.asarray(vocabulary, dtype=object).take(codes) if len(tokens) else np.empty(0, dtype=object)
    return flat, np.repeat(np.arange(len(cells)), counts)


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
