"""Model lookup: this plugin's models first, then RecBole's general and context-aware ones.

Only ``get_model`` imports RecBole: ``PLUGIN_MODELS`` and ``RECBOLE_SUBMODULES`` are read by
``recbole_fbsm.config.settings`` to reject an unknown model before torch and RecBole are imported.
"""

import importlib
import importlib.util

from recbole_fbsm.config.suggestions import suggestion
from recbole_fbsm.errors import ColdStartError

PLUGIN_MODELS = {
    "FBSM": "recbole_fbsm.models.fbsm",
    "UFSM": "recbole_fbsm.models.ufsm",
    "CoSim": "recbole_fbsm.models.cosim",
    "ItemKNNCBF": "recbole_fbsm.models.itemknncbf",
    "Random": "recbole_fbsm.models.random",
    "DropoutNet": "recbole_fbsm.models.coldstart.dropoutnet",
    "Heater": "recbole_fbsm.models.coldstart.heater",
    "ALDI": "recbole_fbsm.models.coldstart.aldi",
    "HybridBlend": "recbole_fbsm.models.hybrid_blend",
}
# Sequential and knowledge-aware models need inputs (sequences, a KG) that the item split does not provide.
RECBOLE_SUBMODULES = ("general_recommender", "context_aware_recommender")


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
    from recbole_fbsm.config.settings import model_names  # settings imports this module's tables

    raise ColdStartError(unknown_model_message(name, model_names()))


def unknown_model_message(name, available):
    return f"unknown model {name!r}{suggestion(name, available) or '.'} Available models: {', '.join(available)}."
