"""Writing results as CSV or JSON, chosen by extension or flag: a table is CSV, or JSON as its list of rows.

A file is written whole or not at all (a temporary file in its folder, renamed over it): a run killed while
writing leaves the previous file as it was."""

import json
import math
import sys
from pathlib import Path

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.storage.safe_files import write_atomic


def resolve_format(path, fmt=None):
    """``fmt`` when given (argparse checked it), else the extension of ``path`` (.csv or .json); CSV for stdout."""
    extension = fmt or ("csv" if path in (None, "-") else Path(path).suffix.lower().lstrip("."))
    if extension not in ("csv", "json"):
        raise ColdStartError(
            f"output file {path}: cannot tell the format from its extension {Path(path).suffix!r}; "
            "name it .csv or .json, or pass --format csv|json."
        )
    return extension


def _clean(value):
    """JSON-able: numpy scalars as Python's, float32 scores at float32 precision (7 digits), NaN as null."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    value = value.item() if hasattr(value, "item") and not isinstance(value, str) else value
    if isinstance(value, float):
        return float(f"{value:.7g}") if math.isfinite(value) else None
    return value


def write_output(path, fmt, table, document=None):
    """Write ``table`` (a DataFrame) as CSV, or as JSON ``document`` (default: the table's rows), to ``path``
    (None or '-': stdout), atomically; the folder of ``path`` is created."""
    if resolve_format(path, fmt) == "csv":
        text = table.to_csv(index=False, float_format="%.6g")
    else:
        document = table.to_dict("records") if document is None else document
        text = json.dumps(_clean(document), indent=2, ensure_ascii=False) + "\n"
    if path in (None, "-"):
        sys.stdout.write(text)
        return None
    return write_text(Path(path), text)


def write_text(path, text):
    """``text`` written atomically to ``path``; a ColdStartError naming the file when it cannot be."""
    try:
        write_atomic(path, text.encode("utf-8"))
    except OSError as error:
        raise ColdStartError(
            f"output file {path} cannot be written ({error.strerror or error}); expected a path in a writable folder."
        ) from None
    return path
