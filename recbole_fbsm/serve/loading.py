"""A saved checkpoint back to a ready model, and the training data its features come from.

A checkpoint holds RecBole's pickled Config and the learned parameters only: the feature matrices F,
F_U and R are non-persistent buffers. They are rebuilt here exactly as training built them (same
dataset files, same item split, same weighting), the way ``recbole_fbsm.quick_start.prepare`` does,
and the parameters are loaded on top. The rebuilt ``ItemFeatures`` (with the column weights learned
on training items) is kept, so that brand-new items can be weighted the same way.
"""

import os
from dataclasses import dataclass

import numpy as np
import torch
from recbole.utils import init_seed

from recbole_fbsm.data import create_dataset, data_preparation
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.features import feature_fields, features_from_config, is_dense_field, term_counts, training_items
from recbole_fbsm.models.base import FeatureSimilarityRecommender
from recbole_fbsm.models.coldstart.base import ContentColdStartRecommender
from recbole_fbsm.quick_start import build_model
from recbole_fbsm.trainer import load_checkpoint

SERVED_MODELS = ("FBSM", "UFSM", "CoSim", "DropoutNet", "Heater", "ALDI")
# models that score an item from its feature row (the others are refused: they cannot serve new items)
FEATURE_MODEL_BASES = (FeatureSimilarityRecommender, ContentColdStartRecommender)


@dataclass
class ServedModel:
    """A trained feature-similarity model with the data it was trained on."""

    checkpoint: str
    config: object             # RecBole Config, as pickled in the checkpoint (device possibly changed)
    model: FeatureSimilarityRecommender
    train_data: object         # RecBole dataloaders of the checkpoint's split
    valid_data: object
    test_data: object
    features: object           # recbole_fbsm.features.ItemFeatures, with column_weights
    fields: list               # the item feature fields
    training_item_frequency: np.ndarray  # per feature: how many training items have it

    @property
    def model_name(self):
        return type(self.model).__name__

    @property
    def dataset(self):
        """The training split's dataset (shares vocabulary and ids with the other splits)."""
        return self.train_data._dataset

    @property
    def uid_field(self):
        return self.dataset.uid_field

    @property
    def iid_field(self):
        return self.dataset.iid_field

    @property
    def device(self):
        return self.model.F.values.device

    def training_items(self):
        """Internal ids of the items the features were weighted on (the training split)."""
        return training_items(self.dataset)

    # ------------------------------------------------------------------------------ token <-> id
    def user_ids(self, tokens):
        """Internal ids of external user tokens; a ColdStartError lists the unknown ones."""
        return self._ids(self.uid_field, tokens, "user")

    def item_ids(self, tokens):
        """Internal ids of the dataset's (not new) items."""
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
                f"{len(unknown)} {what}(s) not in dataset {self.dataset.dataset_name!r} of checkpoint "
                f"{self.checkpoint}: {shown}."
            )
        return torch.as_tensor([mapping[t] for t in tokens], dtype=torch.long, device=self.device)

    # ---------------------------------------------------------------------------------- likes
    def training_likes_per_user(self):
        """Number of training likes of every user id (index = internal id)."""
        R = self.model.R
        return (R.indptr[1:] - R.indptr[:-1]).cpu().numpy()


def read_checkpoint(path):
    """The checkpoint dict, with clear errors for a missing file, an unreadable one, or another model."""
    path = str(path)
    if not os.path.isfile(path):
        raise ColdStartError(f"checkpoint {path} not found (expected a .pth file written by run_recbole.py or quick_start.run).")
    try:
        checkpoint = load_checkpoint(path)
    except Exception as error:  # noqa: BLE001 (torch raises many kinds for a bad file)
        raise ColdStartError(
            f"checkpoint {path} cannot be read ({type(error).__name__}: {error}); expected a .pth file "
            "written by run_recbole.py or recbole_fbsm.quick_start.run."
        ) from None
    if not isinstance(checkpoint, dict) or "config" not in checkpoint or "state_dict" not in checkpoint:
        raise ColdStartError(f"checkpoint {path}: expected a dict with 'config' and 'state_dict' (a RecBole checkpoint).")
    config = checkpoint["config"]
    name = config["model"]
    model_class = getattr(config, "model_class", None)
    if name not in SERVED_MODELS or (
        isinstance(model_class, type) and not issubclass(model_class, FEATURE_MODEL_BASES)
    ):
        raise ColdStartError(
            f"checkpoint {path} holds a {name} model; expected one of {', '.join(SERVED_MODELS)} "
            "(models that score an item by its features, so that they can serve items never seen in training)."
        )
    return checkpoint


def load_model(checkpoint, device="cpu", data_path=None):
    """Load ``checkpoint`` (a path) and rebuild its model on the training split of its dataset.

    ``device``: where the model goes (default CPU, whatever it was trained on). ``data_path``: the
    folder holding the dataset's folder, when the data has moved since training (RecBole's
    ``data_path`` setting; default: the one recorded in the checkpoint).
    """
    path = str(checkpoint)
    state = read_checkpoint(path)
    config = state["config"]
    config["device"] = torch.device(device)
    if data_path is not None:
        config["data_path"] = os.path.join(str(data_path), config["dataset"])
    init_seed(config["seed"], config["reproducibility"])
    try:
        dataset = create_dataset(config)
    except ColdStartError as error:
        raise ColdStartError(
            f"checkpoint {path}: its features are rebuilt from its dataset, which cannot be loaded: {error} "
            "If the data moved since training, give the folder holding the dataset's folder (--data-path / data_path=)."
        ) from None
    train_data, valid_data, test_data = data_preparation(config, dataset, reads_own_features=True)
    if issubclass(config.model_class, ContentColdStartRecommender):
        config["warm_checkpoint"] = path  # the warm tables are in the checkpoint: no retraining of the backbone
    model = build_model(config, train_data._dataset)
    try:
        model.load_state_dict(state["state_dict"])
    except RuntimeError as error:
        raise ColdStartError(
            f"checkpoint {path}: its parameters do not fit the model rebuilt from dataset "
            f"{config['dataset']!r} at {config['data_path']} (have the dataset files changed since training?): {error}"
        ) from None
    model.load_other_parameter(state.get("other_parameter"))
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)

    train_dataset = train_data._dataset
    fields = feature_fields(train_dataset, config["feature_fields"])
    dense = [field for field in fields if is_dense_field(train_dataset, field)]
    if dense:
        raise ColdStartError(
            f"checkpoint {path}: the model uses dense float_seq feature fields {dense}; serving new items reads "
            "token/token_seq fields only (train without them to serve, or score through run())."
        )
    served = ServedModel(path, config, model, train_data, valid_data, test_data, None, fields, None)
    training_items = served.training_items()
    features = features_from_config(train_dataset, training_items, config, model.normalize_features(config))
    _check_same_features(features, model)
    counts = term_counts(train_dataset, fields)[0][:, features.source_columns]
    served.features = features
    served.training_item_frequency = np.asarray((counts[training_items] > 0).sum(axis=0)).ravel()
    return served


def _check_same_features(features, model):
    """New items are weighted with ``features``: it must be what the model was built with."""
    F = model.F
    same = (
        list(features.names) == list(model.feature_names)
        and features.matrix.shape == tuple(F.shape)
        and np.array_equal(features.matrix.indptr, F.indptr.cpu().numpy())
        and np.array_equal(features.matrix.indices, F.indices.cpu().numpy())
        and np.allclose(features.matrix.data, F.values.cpu().double().numpy(), rtol=1e-5, atol=1e-7)
    )
    if not same:
        raise RuntimeError(
            "the item features rebuilt for serving differ from the model's own F: new items would not be "
            "weighted like the training items (has build_item_features or the model's feature setup changed?)."
        )
