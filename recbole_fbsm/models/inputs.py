"""What a content model is built from, fitted once on the training split and handed to the model.

A model's ``__init__`` creates parameters; it does not read the dataset's files. The pipeline
(``quick_start.prepare``) fits the inputs once (the weighted item features, the training likes and, for
the models that need it, the warm BPR-MF backbone) and attaches them to the training dataset; a model
artifact (``recbole_fbsm.artifact``) carries the same inputs, so a served model is rebuilt from the
artifact alone, with no dataset folder and no retraining of the backbone.
"""

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from recbole_fbsm.config.schema import setting
from recbole_fbsm.data.features import ItemFeatures, features_from_config, like_matrix, training_items, with_identity
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.models.contract import BuiltFromFittedInputs
from recbole_fbsm.models.warm_backbone import warm_embeddings


@dataclass
class ModelInputs:
    features: ItemFeatures  # fitted on training items; ``transform`` weights any item's term counts
    likes: sp.csr_matrix  # users x items: the training likes (binary)
    training_items: np.ndarray  # internal ids of the training split's items
    warm: tuple = None  # (user table, item table) of the warm backbone, when the model needs one


def normalize_features(config, model_class=None):
    """``feature_normalize``: L2 rows unless the run says otherwise, or the model class decides
    (``feature_normalization(config)``: ItemKNNCBF normalises for its ``dot`` similarity only)."""
    decides = getattr(model_class, "feature_normalization", None)
    if decides is not None:
        return bool(decides(config))
    value = config["feature_normalize"]
    return True if value is None else bool(value)


def fit_model_inputs(config, train_dataset, warm_backbone=False, model_class=None):
    """Fit the features on ``train_dataset``'s items, read its likes, train (or load) the warm backbone
    (``model_class``: the model they are for, when it decides the rows' normalisation)."""
    items = training_items(train_dataset)
    features = features_from_config(train_dataset, items, config, normalize_features(config, model_class))
    likes = like_matrix(train_dataset)
    if setting(config, "identity_features"):  # hybrid FBSM: an identity column per item with training likes
        liked = np.flatnonzero(np.diff(likes.tocsc().indptr))
        features = with_identity(
            features,
            liked,
            train_dataset.field2id_token[train_dataset.iid_field][liked],
            setting(config, "identity_weight"),
        )
    if features.n_features == 0:
        raise ColdStartError(f"{config['model']}: the item features are empty (no token in any training item).")
    warm = None
    if warm_backbone:
        warm = warm_embeddings(config, train_dataset)
    return ModelInputs(features, likes, items, warm)


def model_inputs(config, dataset, warm_backbone=False, model_class=None):
    """The inputs the pipeline attached to ``dataset`` (``dataset.model_inputs``), or fitted here when a
    caller built the model on a bare RecBole dataset (RecBole's own tools, tests)."""
    inputs = getattr(dataset, "model_inputs", None)
    if inputs is None:
        return fit_model_inputs(config, dataset, warm_backbone, model_class)
    if warm_backbone and inputs.warm is None:
        inputs.warm = warm_embeddings(config, dataset)
    return inputs


def needs_warm_backbone(model_class, config):
    """Whether ``model_class`` with ``config`` trains on a warm backbone (its ``uses_warm_backbone``)."""
    return issubclass(model_class, BuiltFromFittedInputs) and bool(model_class.uses_warm_backbone(config))
