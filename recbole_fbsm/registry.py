"""Model and trainer lookup: this plugin's models first, then RecBole's general and context-aware ones.

Only the lookup functions import RecBole: ``PLUGIN_MODELS`` and ``RECBOLE_SUBMODULES`` are read by
``recbole_fbsm.settings`` to reject an unknown model before torch and RecBole are imported.
"""

import importlib
import importlib.util

from recbole_fbsm.errors import ColdStartError

PLUGIN_MODELS = {"FBSM": "recbole_fbsm.models.fbsm", "UFSM": "recbole_fbsm.models.ufsm", "CoSim": "recbole_fbsm.models.cosim",
                 "ItemKNNCBF": "recbole_fbsm.models.itemknncbf",
                 "Random": "recbole_fbsm.models.random",
                 "DropoutNet": "recbole_fbsm.models.coldstart.dropoutnet", "Heater": "recbole_fbsm.models.coldstart.heater",
                 "ALDI": "recbole_fbsm.models.coldstart.aldi"}
# Sequential and knowledge-aware models need inputs (sequences, a KG) that the item split does not provide.
RECBOLE_SUBMODULES = ("general_recommender", "context_aware_recommender")


def recbole_model_names():
    from recbole.model.abstract_recommender import AbstractRecommender

    names = []
    for submodule in RECBOLE_SUBMODULES:
        package = importlib.import_module(f"recbole.model.{submodule}")
        names += [
            name for name, obj in vars(package).items()
            if isinstance(obj, type) and issubclass(obj, AbstractRecommender) and obj.__module__.startswith("recbole.model")
        ]
    return sorted(set(names))


def available_model_names():
    return list(PLUGIN_MODELS) + [name for name in recbole_model_names() if name not in PLUGIN_MODELS]


def get_model(name):
    """Return the model class called ``name``; a clear error listing the choices otherwise."""
    if name in PLUGIN_MODELS:
        return getattr(importlib.import_module(PLUGIN_MODELS[name]), name)
    # A name that is not an identifier ('BPR.yaml', '../x') is no module name: find_spec would raise.
    for submodule in RECBOLE_SUBMODULES if str(name).isidentifier() else ():
        module_path = f"recbole.model.{submodule}.{name.lower()}"
        if importlib.util.find_spec(module_path) is not None:
            model_class = getattr(importlib.import_module(module_path), name, None)
            if model_class is not None:
                return model_class
    from recbole_fbsm.settings import unknown_model_message

    raise ColdStartError(unknown_model_message(name, available_model_names()))


def get_trainer(model_type, model_name):
    """RecBole's trainer for this model, with the cold-start evaluation mixed in."""
    from recbole.utils import ModelType

    from recbole_fbsm.early_stopping import paper_early_stopping
    from recbole_fbsm.trainer import cold_start_trainer_class

    if model_type == ModelType.DECISIONTREE:
        raise ColdStartError(f"model {model_name!r}: decision-tree models are not supported by this plugin.")
    return paper_early_stopping(cold_start_trainer_class(recbole_get_trainer(model_type, model_name)))


def recbole_get_trainer(model_type, model_name):
    from recbole.utils import get_trainer

    return get_trainer(model_type, model_name)
