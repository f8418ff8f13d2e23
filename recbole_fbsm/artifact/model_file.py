"""The model artifact: one safetensors file (docs/serve.md) that holds everything needed to score, without the
dataset: the tensors, and in the header's metadata the rest as JSON with the SHA-256 of it all. safetensors
parses it (no pickle: loading runs no code) and refuses a file cut short; the SHA-256 refuses any changed bit."""

import dataclasses
import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import scipy.sparse as sp
import torch
from recbole.utils import FeatureType

from recbole_fbsm.data.analyzer import analyzer_path, read_analyzer_document
from recbole_fbsm.data.features import ItemFeatures, item_token_rows
from recbole_fbsm.data.token_ids import TokenIds
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.models.inputs import ModelInputs
from recbole_fbsm.storage.run_records import package_version
from recbole_fbsm.storage.safe_files import Settings, decode_arrays, encode_arrays, load_tensors, plain, save_tensors

FORMAT = "recbole-fbsm model"
FORMAT_VERSION = 6  # 1 to 3: torch.save zips, 4: tensors apart from their place, 5: CSR as named records
SUFFIX = ".fbsm"
HEADER = ("format", "format_version", "package_version")  # metadata entries read before anything else


def features_record(features):
    """``ItemFeatures`` field by field: numpy arrays and the CSR matrix as they are (``write_artifact`` stores them
    as tensors), the names as tokens, the rest as plain data."""
    values = {field.name: getattr(features, field.name) for field in dataclasses.fields(features)}
    record = {k: v if isinstance(v, np.ndarray) or sp.issparse(v) else plain(v) for k, v in values.items()}
    return record | {"names": tokens_record(features.names)}


def features_from_record(record):
    values = record | {"names": decode_tokens(record["names"]).tolist()}
    return ItemFeatures(**values | {name: tuple(values[name]) for name in ("fields", "dense_fields")})


@dataclass
class Vocabulary:
    """The ids and tokens of the dataset a model was trained on: what a model and the serving code ask of a
    RecBole dataset, without the data."""

    dataset_name: str
    uid_field: str
    iid_field: str
    field2id_token: dict  # field -> np.ndarray of tokens by internal id (0: padding)
    field2type: dict  # field -> FeatureType
    model_inputs: ModelInputs = None  # the fitted inputs a model is built from (data.model_inputs)

    def num(self, name):
        return len(self.field2id_token[name])

    @property
    def user_num(self):
        return self.num(self.uid_field)

    @property
    def item_num(self):
        return self.num(self.iid_field)

    @cached_property
    def field2token_id(self):
        return {name: TokenIds(tokens) for name, tokens in self.field2id_token.items()}


def tokens_record(tokens):
    """Tokens as {"utf8": their UTF-8 bytes one after the other, "lengths": bytes per token}: two tensors, encoded
    by pyarrow without a Python object per token."""
    _, offsets, data = pa.array(np.asarray(tokens).astype(str), type=pa.large_string()).buffers()
    offsets = np.frombuffer(offsets, dtype=np.int64)
    utf8 = np.frombuffer(data, dtype=np.uint8)[: offsets[-1]].copy()
    return {"utf8": torch.from_numpy(utf8), "lengths": torch.from_numpy(np.diff(offsets))}


def decode_tokens(record):
    """A ``tokens_record`` back to an array of strings."""
    offsets = np.concatenate(([0], np.cumsum(record["lengths"].numpy())))
    array = pa.LargeStringArray.from_buffers(
        len(offsets) - 1, pa.py_buffer(offsets), pa.py_buffer(record["utf8"].numpy())
    )
    return array.to_numpy(zero_copy_only=False)


def vocabulary_record(dataset, fields):
    tokens = {
        name: tokens_record(dataset.field2id_token[name])
        for name in [dataset.uid_field, dataset.iid_field] + list(fields)
    }
    return {
        "dataset": str(dataset.dataset_name),
        "uid_field": dataset.uid_field,
        "iid_field": dataset.iid_field,
        "tokens": tokens,
        "types": {name: dataset.field2type[name].value for name in fields},
    }


def vocabulary_from_record(record):
    tokens = {name: decode_tokens(values) for name, values in record["tokens"].items()}
    types = {name: FeatureType(kind) for name, kind in record["types"].items()}
    return Vocabulary(record["dataset"], record["uid_field"], record["iid_field"], tokens, types)


def split_record(dataset):
    """Items and likes of a validation or test split (None when there is none)."""
    if dataset is None or getattr(dataset, "split_items", None) is None:
        return None
    return {
        "items": np.asarray(dataset.split_items, dtype=np.int64),
        "users_of_likes": dataset.inter_feat[dataset.uid_field].numpy().astype(np.int64),
        "items_of_likes": dataset.inter_feat[dataset.iid_field].numpy().astype(np.int64),
    }


def training_record(config, result):
    """The artifact's ``training``: the kept epoch (-1: the untrained start, None: not known), its validation
    score and the untrained start's, from ``quick_start.run``'s result."""

    def number(value):
        return None if value is None else float(value)

    epoch = result.get("best_epoch")
    return {
        "kept_epoch": None if epoch is None else int(epoch),
        "valid_metric": str(config["valid_metric"]).lower(),
        "kept_valid_score": number(result.get("best_valid_score")),
        "start_valid_score": number(result.get("start_valid_score")),
        # the users direction's calibration |I_u|^-alpha, chosen on validation (evaluation.audience); None: not run
        "audience_alpha": number((result.get("audience") or {}).get("alpha")),
    }


def build_artifact(model, config, train_dataset, valid_dataset=None, test_dataset=None, analyzer=None, training=None):
    """The artifact of a trained ``model`` (or of its state dict); ``train_dataset`` carries the fitted
    ``model_inputs`` and the ``data_fingerprint`` (``quick_start.prepare`` attaches both)."""
    inputs, weights = train_dataset.model_inputs, model if isinstance(model, dict) else model.state_dict()
    features, warm = inputs.features, inputs.warm
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "package_version": package_version(),
        "model": str(config["model"]),
        "settings": dict(Settings.of(config)),
        "data": train_dataset.data_fingerprint,
        "vocabulary": vocabulary_record(train_dataset, features.fields),
        "features": features_record(features),
        "likes": sp.csr_matrix(inputs.likes),
        "training_items": np.asarray(inputs.training_items, dtype=np.int64),
        "warm_shapes": None if warm is None else [list(warm[0].shape), list(warm[1].shape)],
        "split": {"valid": split_record(valid_dataset), "test": split_record(test_dataset)},
        "analyzer": analyzer,
        "state_dict": {key: value.detach().cpu() for key, value in weights.items()},
        "training": training,
        "titles": titles_record(train_dataset, features.fields, config["seq_separator"]),
    }


def titles_record(dataset, fields, separator):
    """Each item's title (its tokens joined, in order; '' for [PAD]) when a feature field is a title or name
    (ml-100k's ``movie_title``), so that answers can name items; None otherwise."""
    field = next((f for f in fields if re.fullmatch(r"(.*_)?(title|name)", f.lower())), None)
    if field is None:
        return None
    indptr, indices = item_token_rows(dataset, field)
    tokens = np.asarray(dataset.field2id_token[field], dtype=object)[indices]
    return {"field": field, "items": [(separator or " ").join(row) for row in np.split(tokens, indptr[1:-1])]}


def dataset_analyzer(config, fields, dataset):
    """The converter's analyzer document beside the dataset (None: none)."""
    path = analyzer_path(config["data_path"], config["dataset"])
    if not path.is_file():
        return None
    try:
        return read_analyzer_document(path)
    except ValueError as error:
        raise ColdStartError(str(error)) from None


def write_artifact(path, artifact):
    """Write atomically, in the one model file format (``storage.safe_files.save_tensors``), the header first."""
    header = {key: str(artifact[key]) for key in HEADER}
    try:
        save_tensors(encode_arrays({k: v for k, v in artifact.items() if k not in HEADER}), path, header)
    except OSError as error:
        raise ColdStartError(f"model artifact {path} could not be written ({error.strerror or error}).") from None
    return path


def read_artifact(path, read=None):
    """The artifact written at ``path`` (``read``: its ``load_tensors`` result when the caller has it): the header's
    format and version checked, then the content."""
    header, content = read or load_tensors(path, "model file")
    if header.get("format") != FORMAT:
        raise ColdStartError(
            f"{path} is neither a recbole-fbsm model artifact (.fbsm) nor a training checkpoint (.pth)."
        )
    if header.get("format_version") != str(FORMAT_VERSION):
        raise ColdStartError(
            f"model artifact {path} has format version {header.get('format_version')} (written by recbole-fbsm "
            f"{header.get('package_version')}); this release ({package_version()}) reads version {FORMAT_VERSION} "
            f"only: retrain, or export it again from a checkpoint this release wrote (recbole-fbsm serve export "
            f"CHECKPOINT.pth -o MODEL{SUFFIX})."
        )
    return decode_arrays(content) | header | {"format_version": FORMAT_VERSION}


def model_inputs_from_artifact(content, device):
    """The ``ModelInputs`` of the artifact's model (the warm tables as zeros: the state dict fills them)."""
    features = features_from_record(content["features"])
    warm = None
    if content.get("warm_shapes"):
        users, items = content["warm_shapes"]
        warm = (torch.zeros(users, device=device), torch.zeros(items, device=device))
    return ModelInputs(features, content["likes"], content["training_items"], warm)
