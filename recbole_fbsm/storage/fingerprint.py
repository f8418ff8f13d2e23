"""A content fingerprint of a dataset's atomic files, so that a stored result is reused only on the
data it was computed from (and a model artifact says which data it was trained on)."""

import hashlib
import os
from pathlib import Path

from recbole_fbsm.config.cold_start_config import ColdStartConfig

# RecBole's atomic file suffixes (``Dataset._load_data`` reads these when present)
ATOMIC_SUFFIXES = ("inter", "item", "user", "kg", "link", "net")
_CACHE = {}


def file_digest(path):
    """sha256 of a file's bytes, cached on (path, size, modification time) within the process."""
    stat = os.stat(path)
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _CACHE:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        _CACHE[key] = digest.hexdigest()
    return _CACHE[key]


def data_fingerprint(folder, name):
    """{"dataset", "files": {file name: sha256}, "sha256": of them all} for ``folder/name.<suffix>``.

    Every atomic file RecBole may read for the dataset takes part (whether or not ``load_col`` keeps all
    its columns): a changed rating, item text or user row gives another fingerprint.
    """
    files = {}
    for suffix in ATOMIC_SUFFIXES:
        path = os.path.join(str(folder), f"{name}.{suffix}")
        if os.path.isfile(path):
            files[f"{name}.{suffix}"] = file_digest(path)
    combined = hashlib.sha256("\n".join(f"{k} {v}" for k, v in sorted(files.items())).encode()).hexdigest()
    return {"dataset": str(name), "files": files, "sha256": combined}


def config_fingerprint(config):
    """``data_fingerprint`` of a RecBole config's dataset (``data_path`` is the dataset's folder)."""
    return data_fingerprint(config["data_path"], config["dataset"])


def fingerprint_of(dataset, config_file_list=None, overrides=None):
    """The fingerprint of the data a run of ``dataset`` with these settings would read (None when the
    settings name no readable dataset: the run itself will say why)."""
    try:
        config = ColdStartConfig(
            model="CoSim", dataset=dataset, config_file_list=config_file_list, config_dict=dict(overrides or {})
        )
        return config_fingerprint(config)["sha256"]
    except Exception:  # noqa: BLE001 (a bad setting is reported by the run)
        return None
