"""The JSON record of a finished run, shared by ``run()``'s result file, ``compare`` and the tuner.

A record carries the ``settings`` it was computed with, and reuse requires the same settings: the dataset's
name, each config file's path and content hash, the ``--key=value`` overrides, the package version and
the content fingerprint of the dataset's atomic files (``artifact.fingerprint``). Changed data or a new
release means a new run, never an old number.
"""

import hashlib
import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from recbole_fbsm.storage.fingerprint import fingerprint_of
from recbole_fbsm.storage.safe_files import write_atomic


def package_version():
    try:
        return version("recbole-fbsm")
    except PackageNotFoundError:
        return "unknown"


def settings_of(dataset, config_file_list, overrides):
    """What a stored result must match to be reused (see the module docstring)."""
    files = []
    for path in config_file_list or []:
        try:
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            digest = None
        files.append({"path": str(path), "sha256": digest})
    return {
        "dataset": str(dataset),
        "config_files": files,
        "overrides": {k: str(v) for k, v in (overrides or {}).items()},
        "data_sha256": fingerprint_of(dataset, config_file_list, overrides),
        "package_version": package_version(),
    }


def changed_settings(old, new):
    """The names of the settings that differ between two ``settings_of`` results, for messages."""
    names = {
        "data_sha256": "the data",
        "package_version": "the package version",
        "config_files": "config files",
        "overrides": "overrides",
        "dataset": "dataset",
    }
    return [label for key, label in names.items() if (old or {}).get(key) != (new or {}).get(key)]


def plain_record_value(value):
    """numpy scalars and OrderedDicts to JSON-friendly floats and dicts."""
    if isinstance(value, dict):
        return {str(k): plain_record_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_record_value(v) for v in value]
    if isinstance(value, (str, bool, int)) or value is None:
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def write_record(path, record):
    write_atomic(path, (json.dumps(record, indent=2, sort_keys=False) + "\n").encode("utf-8"))


def read_record(path):
    """The record stored at ``path``, or None when it is missing or not a result record."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not {"model", "seed", "status", "settings"} <= set(record):
        return None
    return record
