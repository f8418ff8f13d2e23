"""Files written whole or not at all (a temporary file, flushed and renamed: a killed run never leaves half a file),
and read without running code (safetensors and JSON: tensors and plain values only).
"""

import hashlib
import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from recbole_fbsm.errors import ColdStartError


def write_atomic(path, data):
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename. ``data``: bytes, or a
    function that writes to the open binary file it is given, or to ``handle.name`` (a large file is then never
    held in memory)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False) as handle:
        try:
            data(handle) if callable(data) else handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            os.chmod(handle.name, 0o644)  # a file's usual permissions (a temporary file is private)
            os.replace(handle.name, path)
        except BaseException:
            Path(handle.name).unlink(missing_ok=True)
            raise


def save_tensors(record, path, header=None):
    """``record`` (dicts, lists, tensors and plain values) as one safetensors file, atomically: the tensors by
    safetensors, the rest as JSON in its metadata beside ``header``'s entries and the SHA-256 of it all. Checkpoints
    and model artifacts are both such files (one model file format)."""
    tensors = {}
    metadata = {**(header or {}), "content": json.dumps(_encoded(record, [], tensors))}
    metadata["sha256"] = content_digest(metadata, tensors)
    write_atomic(path, lambda handle: save_file(tensors, handle.name, metadata))
    return path


def load_tensors(path, what, device="cpu"):
    """(header, record) of a file ``save_tensors`` wrote: parsed by safetensors (no pickle: loading runs no code),
    its SHA-256 checked, the tensors read into memory (``pread``: a file replaced later cannot pull pages from a
    running service); ``what`` names the file in errors ("checkpoint", "model file")."""
    path = str(path)
    if not os.path.isfile(path):
        raise ColdStartError(f"{what} {path} not found.")
    try:
        with safe_open(path, framework="pt", backend="pread") as file:
            metadata = file.metadata() or {}
            tensors = {name: file.get_tensor(name) for name in file.keys()}
    except SafetensorError as error:
        if zipfile.is_zipfile(path):
            raise PickledFileError(path, what) from None
        raise ColdStartError(
            f"{what} {path} is not a file of recbole-fbsm (safetensors): another kind of file, or one cut short "
            f"in a copy ({error})."
        ) from None
    if "content" not in metadata or "sha256" not in metadata:
        raise ColdStartError(
            f"{path} is neither a recbole-fbsm model artifact (.fbsm) nor a training checkpoint (.pth) (a safetensors "
            "file of other data)."
        )
    if content_digest(metadata, tensors) != metadata["sha256"]:
        raise ColdStartError(
            f"{what} {path}: its SHA-256 is not the one it was written with: the file was damaged or edited since "
            "(copy it again, or retrain)."
        )
    record = _decoded(json.loads(metadata["content"]), {k: v.to(device) for k, v in tensors.items()})
    return {k: v for k, v in metadata.items() if k not in ("content", "sha256")}, record


def content_digest(metadata, tensors):
    """SHA-256 of the metadata (but the digest) and of each tensor's name, dtype, shape and bytes."""
    digest = hashlib.sha256(json.dumps({k: v for k, v in metadata.items() if k != "sha256"}, sort_keys=True).encode())
    for name in sorted(tensors):
        tensor = tensors[name]
        digest.update(f"\n{name} {tensor.dtype} {list(tensor.shape)}\n".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def _encoded(value, path, tensors):
    """``value`` as JSON, each tensor moved to ``tensors`` under its path (a JSON list) and left as a reference."""
    if isinstance(value, torch.Tensor):
        name = json.dumps(path)
        tensors[name] = value.detach().cpu().contiguous()
        return {"__tensor__": name}
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            return {key: _encoded(item, [*path, key], tensors) for key, item in value.items()}
        return {"__items__": [[key, _encoded(item, [*path, key], tensors)] for key, item in value.items()]}
    if isinstance(value, (list, tuple)):
        return [_encoded(item, [*path, k], tensors) for k, item in enumerate(value)]
    return value


def _decoded(value, tensors):
    if isinstance(value, dict):
        if set(value) == {"__tensor__"}:
            return tensors[value["__tensor__"]]
        if set(value) == {"__items__"}:
            return {key: _decoded(item, tensors) for key, item in value["__items__"]}
        return {key: _decoded(item, tensors) for key, item in value.items()}
    if isinstance(value, list):
        return [_decoded(item, tensors) for item in value]
    return value


class PickledFileError(ColdStartError):
    """A torch.save file (a pickle in a zip): this release neither reads nor runs one."""

    def __init__(self, path, what):
        super().__init__(
            f"{what} {path} holds pickled Python objects (a torch.save file: a checkpoint of RecBole itself, or of "
            "recbole-fbsm before 0.3): loading it could run any code, so it is not loaded; retrain with this release."
        )


def load_checkpoint(path, device="cpu", read=None):
    """A training checkpoint (``ColdStartTrainerMixin._save_checkpoint``'s ``save_tensors`` file, no format in its
    header): its settings as ``Settings``, RecBole's ``other_parameter`` decoded."""
    header, state = read or load_tensors(path, "checkpoint", device)
    if header.get("format"):
        raise ColdStartError(f"{path} is a {header['format']}, not a training checkpoint (.pth).")
    if not isinstance(state, dict) or "state_dict" not in state:
        raise ColdStartError(
            f"{path} is neither a recbole-fbsm model artifact (.fbsm) nor a training checkpoint (.pth)."
        )
    state["config"] = Settings(state["config"])
    if state.get("other_parameter") is not None:
        state["other_parameter"] = decode_arrays(state["other_parameter"])
    return state


def encode_arrays(value):
    """numpy arrays and scipy sparse matrices (RecBole's EASE, ItemKNN, ... ``other_parameter``) as tagged tensors,
    which ``save_tensors`` stores; ``decode_arrays`` undoes it."""
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
