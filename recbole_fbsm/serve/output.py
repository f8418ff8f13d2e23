"""Writing results as CSV (one flat table) or JSON (nested records), chosen by extension or flag.

A file is written whole or not at all (a temporary file in its folder, renamed over it): a run killed while
writing leaves the previous file as it was."""

import json
import math
import sys
from pathlib import Path

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.storage.safe_files import write_atomic

FORMATS = ("csv", "json")


def resolve_format(path, fmt=None):
    """``fmt`` when given, else the extension of ``path`` (.csv or .json); CSV for stdout."""
    if fmt:
        if fmt not in FORMATS:
            raise ColdStartError(f"--format: expected one of {', '.join(FORMATS)}; got {fmt!r}.")
        return fmt
    if path is None or str(path) == "-":
        return "csv"
    extension = Path(path).suffix.lower().lstrip(".")
    if extension in FORMATS:
        return extension
    raise ColdStartError(
        f"output file {path}: cannot tell the format from its extension {Path(path).suffix!r}; "
        "name it .csv or .json, or pass --format csv|json."
    )


def grouped_records(frame, key, list_name):
    """[{key: k, list_name: [row, ...]}, ...] from a long table, rows in their order (for JSON)."""
    return [
        {key: value, list_name: group.drop(columns=[key, "rank"], errors="ignore").to_dict("records")}
        for value, group in frame.groupby(key, sort=False)
    ]


def _clean(value):
    if isinstance(value, float):
        # float32 scores printed as float32 precision (7 significant digits), not as their float64 expansion
        return float(f"{value:.7g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return _clean(value.item())
    return value


def write_output(path, fmt, table, document):
    """Write ``table`` (a DataFrame) as CSV or ``document`` (JSON-able) as JSON to ``path`` (None or
    '-': stdout), atomically. The folder of ``path`` is created."""
    fmt = resolve_format(path, fmt)
    if fmt == "csv":
        text = table.to_csv(index=False, float_format="%.6g")
    else:
        text = json.dumps(_clean(document), indent=2, ensure_ascii=False) + "\n"
    if path is None or str(path) == "-":
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
