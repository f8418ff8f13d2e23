"""A model artifact (``.fbsm``, written beside every checkpoint) back to a ready model, with no dataset folder;
a training checkpoint (``.pth``) is exported to an artifact in memory through its dataset (``export_checkpoint``).
"""

import os
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from recbole.utils import init_seed

from recbole_fbsm.artifact.model_file import (
    build_artifact,
    dataset_analyzer,
    model_inputs_from_artifact,
    read_artifact,
    training_record,
    vocabulary_from_record,
)
from recbole_fbsm.config.cold_start_config import ColdStartConfig
from recbole_fbsm.config.registry import get_model
from recbole_fbsm.data import create_dataset, data_preparation
from recbole_fbsm.data.analyzer import analyzer_records
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.kernels.sparse import TorchCsr
from recbole_fbsm.models.inputs import fit_model_inputs
from recbole_fbsm.storage.fingerprint import data_fingerprint
from recbole_fbsm.storage.safe_files import Settings, load_checkpoint, load_tensors

SERVED_MODELS = ("FBSM", "UFSM", "CoSim", "ItemKNNCBF", "DropoutNet", "Heater", "ALDI")
# settings of a checkpoint that RecBole derives (or the machine decides): not given back when rebuilding its Config
DERIVED_SETTINGS = frozenset(
    (
        "model dataset data_path device MODEL_TYPE MODEL_INPUT_TYPE eval_type single_spec local_rank "
        "train_neg_sample_args valid_neg_sample_args test_neg_sample_args eval_neg_sample_args "
        "valid_metric_bigger checkpoint_dir use_gpu gpu_id world_size nproc offset ip port backend log_wandb "
        "wandb_project config_files run_id shuffle worker state show_progress"
    ).split()
)


@dataclass
class ServedModel:
    """A trained feature model with the vocabulary and splits of the data it was trained on."""

    checkpoint: str  # the file it was loaded from (artifact or checkpoint)
    config: Settings  # the run's settings as plain data (missing keys read None)
    model: object
    dataset: object  # ``artifact.model_file.Vocabulary``: ids and tokens, no data
    features: object  # ``features.ItemFeatures`` fitted on the training items
    fields: list  # the item feature fields
    training_item_frequency: np.ndarray  # per feature: how many training items have it
    split: dict  # {"valid": ..., "test": ...}: items and likes of each evaluation split
    analyzer: dict = None  # the converter's analyzer document, when the dataset had one
    data: dict = None  # fingerprint of the training data
    training: dict = None  # the epoch validation kept (``artifact.model_file.training_record``); None: not recorded
    titles: dict = None  # {"field", "items": title per internal item id} where the data has a title field

    @cached_property
    def analyzers(self):
        """{field: FieldRecord} of the converter's analyzer ({} without one), built once per model."""
        return analyzer_records(self.analyzer) if self.analyzer else {}

    @property
    def model_name(self):
        return type(self.model).__name__

    @property
    def uid_field(self):
        return self.dataset.uid_field

    @property
    def iid_field(self):
        return self.dataset.iid_field

    @property
    def device(self):
        return self.config["device"]  # ``served_from_artifact`` moved the model there

    def feature_rows(self, matrix):
        """Items' feature rows (scipy) as ``score_feature_rows`` takes them: torch sparse CSR on the model's device,
        in its F's dtype (ItemKNNCBF, which keeps none: float32)."""
        F = getattr(self.model, "F", None)
        return TorchCsr(matrix, torch.float32 if F is None else F.values.dtype).to_torch_sparse().to(self.device)

    def training_items(self):
        return self.dataset.model_inputs.training_items

    def user_ids(self, tokens):
        """Internal ids of external user tokens; a ColdStartError lists the unknown ones."""
        return self._ids(self.uid_field, tokens, "user")

    def item_ids(self, tokens):
        return self._ids(self.iid_field, tokens, "item")

    def user_tokens(self, ids):
        return [str(t) for t in self.dataset.field2id_token[self.uid_field][np.asarray(ids, dtype=np.int64)]]

    def item_tokens(self, ids):
        return [str(t) for t in self.dataset.field2id_token[self.iid_field][np.asarray(ids, dtype=np.int64)]]

    def _ids(self, field, tokens, what):
        mapping = self.dataset.field2token_id[field]
        tokens = [str(t) for t in tokens]
        unknown = [t for t in tokens if t not in mapping or mapping[t] == 0]
        if unknown:
            shown = ", ".join(repr(t) for t in unknown[:10]) + (" ..." if len(unknown) > 10 else "")
            raise ColdStartError(
                f"{len(unknown)} {what}(s) not in dataset {self.dataset.dataset_name!r} of model {self.checkpoint}: "
                f"{shown}."
            )
        return torch.as_tensor([mapping[t] for t in tokens], dtype=torch.long, device=self.device)

    def training_likes_per_user(self):
        """Number of training likes of every user id (index = internal id)."""
        return np.diff(self.dataset.model_inputs.likes.tocsr().indptr)

    def split_likes(self, name):
        """(user ids, item ids) of the likes of evaluation split ``name`` ("valid" or "test")."""
        part = self._split(name)
        return part["users_of_likes"], part["items_of_likes"]

    def split_items(self, name):
        return self._split(name)["items"]

    def _split(self, name):
        part = (self.split or {}).get(name)
        if part is None:
            raise ColdStartError(
                f"model {self.checkpoint}: no {name} split was recorded (eval_args.group_by must be item)."
            )
        return part


def read_model_file(path, data_path=None):
    """The artifact dict of ``path``: an artifact as it is, or a training checkpoint exported through its dataset
    (both are files of the one model file format, ``storage.safe_files``)."""
    read = load_tensors(path, "model file")  # (header, content), read once for either kind
    if read[0].get("format"):
        return read_artifact(path, read)
    return export_checkpoint(load_checkpoint(path, read=read), path, data_path)


def scoring_device(device):
    """``device`` as a ``torch.device`` this machine has; torch's own answer to a misspelled device or a GPU it
    does not see is a traceback."""
    try:
        torch.zeros(0, device=device)
    except (RuntimeError, AssertionError, TypeError, ValueError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ColdStartError(f"device {device!r} (--device): torch cannot use it here ({reason}).") from None
    return torch.device(device)


def load_model(path, device="cpu", data_path=None):
    """The ``ServedModel`` of an artifact (or of a checkpoint, see ``read_model_file``) on ``device``; a
    ``ServedModel`` is taken as it is (the serving functions take either)."""
    if isinstance(path, ServedModel):
        return path
    device = scoring_device(device)
    return served_from_artifact(read_model_file(path, data_path), str(path), device)


def served_from_artifact(content, source, device="cpu"):
    """Rebuild the model from the artifact's settings, fitted inputs and parameters."""
    name = content["model"]
    _check_served_model(name, source)
    settings = Settings(content["settings"])
    settings["device"] = torch.device(device)
    vocabulary = vocabulary_from_record(content["vocabulary"])  # its SHA-256 checked: no second check here
    vocabulary.model_inputs = model_inputs_from_artifact(content, device)
    features = vocabulary.model_inputs.features
    model = get_model(name)(settings, vocabulary)
    try:
        model.load_state_dict(content["state_dict"])
    except RuntimeError as error:  # a checkpoint's dataset changed since training
        raise ColdStartError(
            f"model {source}: its parameters do not fit the {name} rebuilt from its features (have a checkpoint's "
            f"dataset files changed since training?): {' '.join(str(error).split())}"
        ) from None
    frequency = np.asarray((features.matrix[vocabulary.model_inputs.training_items] != 0).sum(axis=0)).ravel()
    if features.dense_fields:
        raise ColdStartError(
            f"model {source}: the model uses dense float_seq feature fields {list(features.dense_fields)}; serving new "
            "items reads token/token_seq fields only (train without them to serve, or score through run())."
        )
    model = model.to(device).eval().requires_grad_(False)
    extra = [content.get("split") or {}] + [content.get(key) for key in ("analyzer", "data", "training", "titles")]
    return ServedModel(source, settings, model, vocabulary, features, list(features.fields), frequency, *extra)


def _check_served_model(name, source):
    if name not in SERVED_MODELS:
        raise ColdStartError(
            f"model {source} is a {name} model; expected one of {', '.join(SERVED_MODELS)} "
            "(models that score an item by its features, so that they can serve items never seen in training)."
        )


def checkpoint_config(settings, data_path=None):
    """A ColdStartConfig with a checkpoint's settings (``load_checkpoint``'s plain ``Settings``)."""
    given = {key: value for key, value in settings.items() if key not in DERIVED_SETTINGS and value is not None}
    given["data_path"] = os.path.dirname(os.path.normpath(str(settings["data_path"])))
    config = ColdStartConfig(model=settings["model"], dataset=settings["dataset"], config_dict=given)
    config["device"] = torch.device("cpu")
    if data_path is not None:
        config["data_path"] = os.path.join(str(data_path), config["dataset"])
    return config


def export_checkpoint(state, path, data_path=None):
    """The artifact of a training checkpoint: its dataset is read once to fit the features again (checked
    against the feature names the checkpoint recorded) and to record the vocabulary and splits; the model is built
    (and its parameters checked) once, by ``served_from_artifact``."""
    settings = state["config"]
    _check_served_model(settings["model"], path)
    config = checkpoint_config(settings, data_path)
    init_seed(config["seed"], config["reproducibility"])
    try:
        dataset = create_dataset(config)
    except ColdStartError as error:
        raise ColdStartError(
            f"checkpoint {path}: its features are fitted on its dataset, which cannot be loaded: {error} "
            "If the data moved since training, give the folder holding the dataset's folder (--data-path / data_path=)."
        ) from None
    dataset.data_fingerprint = data_fingerprint(config)
    train_data, valid_data, test_data = data_preparation(config, dataset, reads_own_features=True)
    train_dataset = train_data._dataset
    inputs = fit_model_inputs(config, train_dataset, warm_backbone=False, model_class=get_model(config["model"]))
    weights = state["state_dict"]
    if "warm_user_embedding" in weights:  # the two-tower models' backbone is in the checkpoint: no retraining
        inputs.warm = (weights["warm_user_embedding"].float(), weights["warm_item_embedding"].float())
    recorded = state.get("feature_names")
    if recorded is not None and list(recorded) != list(inputs.features.names):
        raise ColdStartError(
            f"checkpoint {path}: the dataset's feature vocabulary is not the one it was trained on "
            f"(trained on {sorted(set(recorded) - set(inputs.features.names))[:3]}, which it lacks, or another "
            "order): its weights would land on other features. "
            "Use the dataset files it was trained on."
        )
    train_dataset.model_inputs = inputs  # the served models keep no other_parameter: the weights are the model
    epoch = state.get("epoch")  # the checkpoint's epoch is the kept one (-1: the untrained start)
    analyzer = dataset_analyzer(config, inputs.features.fields, train_dataset)
    record = training_record(config, {"best_epoch": epoch, "best_valid_score": state.get("best_valid_score")})
    return build_artifact(weights, config, train_dataset, valid_data._dataset, test_data._dataset, analyzer, record)
