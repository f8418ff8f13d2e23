"""A content fingerprint of the atomic files a dataset reads: a stored result is reused only on its own data."""

import hashlib
import os
from functools import cache


@cache
def _file_sha256(path, size, modified_ns):
    """sha256 of a file's bytes, cached on (path, size, modification time) within the process."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def file_sha256(path):
    stat = os.stat(path)
    return _file_sha256(os.path.realpath(path), stat.st_size, stat.st_mtime_ns)


def data_fingerprint(config):
    """{"dataset", "files": {file name: sha256}, "sha256": of them all} of the atomic files RecBole's
    ``Dataset._load_data`` reads under ``config`` (.inter, .user and .item unless ``load_col`` leaves them out, the
    ``additional_feat_suffix`` files)."""
    name, folder, load_col = config["dataset"], config["data_path"], config["load_col"]
    suffixes = ["inter"] + [s for s in ("user", "item") if load_col is None or s in load_col]
    suffixes += list(config["additional_feat_suffix"] or [])
    paths = [os.path.join(str(folder), f"{name}.{suffix}") for suffix in suffixes]
    files = {os.path.basename(path): file_sha256(path) for path in paths if os.path.isfile(path)}
    combined = hashlib.sha256("\n".join(f"{k} {v}" for k, v in sorted(files.items())).encode()).hexdigest()
    return {"dataset": str(config["dataset"]), "files": files, "sha256": combined}
