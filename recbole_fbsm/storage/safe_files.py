"""Files written whole or not at all (a temporary file, flushed and renamed: a killed run never leaves half a file),
and read without running code (``torch.load(weights_only=True)``: tensors and plain containers only).
"""

import os
import pickle
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from recbole_fbsm.errors import ColdStartError


def write_atomic(path, data):
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename. ``data``: bytes, or a
    function that writes to the open binary file it is given, or to ``handle.name`` (a large file is then never
    held in memory)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600 files; give the usual permissions
        os.close(fd)
        with open(tmp, "wb") as handle:  # handle.name: the temporary path, for a writer that opens it by name
            if callable(data):
                data(handle)
            else:
                handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_tensors(obj, path):
    """``torch.save``, atomically, straight into the file (through a buffer a 10^7-like artifact cost 1.2 GB more)."""
    write_atomic(path, lambda handle: torch.save(obj, handle))


def load_tensors(path, what, device="cpu", mmap=False):
    """The content of a file written by ``save_tensors``, loaded without running code; ``what`` names it in errors
    ("checkpoint", "model file"). ``mmap``: the tensors are read when used (``read_model_file`` then copies a
    checkpoint's, so that a file replaced later cannot pull pages from a running service)."""
    path = str(path)
    if not os.path.isfile(path):
        raise ColdStartError(f"{what} {path} not found.")
    # not torch.save's archive: torch's own words would be about its pre-1.6 pickle format, or about mmap
    if not zipfile.is_zipfile(path) or not check_pickle_size(path, what):
        raise ColdStartError(
            f"{what} {path} is not a file written by torch.save (a zip archive, as every .pth checkpoint "
            "is): another kind of file, or one cut short in a copy."
        )
    try:
        return torch.load(path, map_location=device, weights_only=True, mmap=mmap)
    except Exception as error:  # noqa: BLE001 (torch raises many kinds for a damaged file)
        refused = "unsupported global" in str(error).lower() or "not an allowed global" in str(error)
        if isinstance(error, pickle.UnpicklingError) and refused:
            raise PickledFileError(path, what) from None
        raise ColdStartError(f"{what} {path} cannot be read ({type(error).__name__}: {_first_line(error)}).") from None


# torch unpickles a file's plain values (data.pkl) whole before anything can be checked, and a deflated record can
# declare a thousand times its bytes; a 10^6-feature artifact's is tens of MiB
MAX_PICKLE_BYTES = 1 << 28


def check_pickle_size(path, what):
    """Refuse, before torch reads it, a ``data.pkl`` that is compressed (``torch.save`` never does) or too large;
    whether ``path`` is torch.save's archive (a ``data.pkl`` record, the archive from the file's first byte)."""
    try:
        with zipfile.ZipFile(path) as archive, open(path, "rb") as handle:
            records = [info for info in archive.infolist() if info.filename.rsplit("/", 1)[-1] == "data.pkl"]
            starts = handle.read(4) == b"PK\x03\x04"
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise ColdStartError(f"{what} {path} cannot be read ({type(error).__name__}: {_first_line(error)}).") from None
    for info in records:
        if info.compress_type != zipfile.ZIP_STORED:
            raise ColdStartError(
                f"{what} {path}: its pickled values ({info.filename}) are compressed, which "
                "torch.save never does: refused before unpickling (a file from elsewhere?)."
            )
        if info.file_size > MAX_PICKLE_BYTES:
            raise ColdStartError(
                f"{what} {path}: its pickled values ({info.filename}) declare {info.file_size} bytes, "
                f"more than the {MAX_PICKLE_BYTES} this release unpickles: refused before reading them."
            )
    return bool(records) and starts


class PickledFileError(ColdStartError):
    """A file that holds pickled objects beyond tensors and plain values: loading it could run code."""

    def __init__(self, path, what):
        super().__init__(
            f"{what} {path} holds pickled Python objects (a checkpoint of recbole-fbsm before 0.2, or a file "
            "from elsewhere): loading it could run any code, so it is not loaded. If it comes from a source you "
            f"trust, convert it once: recbole-fbsm serve export {path} --trust-pickle -o MODEL.fbsm"
        )


def load_checkpoint(path, device="cpu"):
    """A training checkpoint (``ColdStartTrainerMixin._save_checkpoint``): tensors and plain settings."""
    state = load_tensors(path, "checkpoint", device)
    if isinstance(state, dict) and isinstance(state.get("config"), dict):
        state["config"] = Settings(state["config"])
    if isinstance(state, dict) and state.get("other_parameter") is not None:
        state["other_parameter"] = decode_arrays(state["other_parameter"])
    return state


def encode_arrays(value):
    """numpy arrays and scipy sparse matrices (RecBole's EASE, ItemKNN, ... ``other_parameter``) as tagged tensors,
    which ``weights_only`` loading accepts; ``decode_arrays`` undoes it."""
    if sp.issparse(value):
        matrix = sp.csr_matrix(value)
        parts = [torch.as_tensor(part) for part in (matrix.indptr, matrix.indices, matrix.data)]
        return {"__csr__": [*parts, list(matrix.shape)]}
    if isinstance(value, np.ndarray) and value.dtype != object:
        return {"__ndarray__": torch.as_tensor(value)}
    if isinstance(value, dict):
        return {key: encode_arrays(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_arrays(item) for item in value]
    return value


def decode_arrays(value):
    if isinstance(value, dict):
        if set(value) == {"__csr__"}:
            indptr, indices, data, shape = value["__csr__"]
            return sp.csr_matrix((data.numpy(), indices.numpy(), indptr.numpy()), shape=tuple(shape))
        if set(value) == {"__ndarray__"}:
            return value["__ndarray__"].numpy()
        return {key: decode_arrays(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode_arrays(item) for item in value]
    return value


def _first_line(error):
    return (str(error).strip().splitlines() or [""])[0][:300]


def plain(value):
    """``value`` as JSON-like plain data: numpy and torch scalars to numbers, devices and other objects to
    their text, containers element by element."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy (np.float64 is a float) / torch scalars
        return value.item()
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    return str(value)


class Settings(dict):
    """A run's settings as plain data; a missing key reads as None, as in RecBole's Config."""

    def __getitem__(self, key):
        return self.get(key)

    @classmethod
    def of(cls, config):
        """The final settings of a RecBole ``Config`` (or any mapping) as plain data."""
        values = getattr(config, "final_config_dict", config)
        return cls({str(key): plain(value) for key, value in values.items()})
