"""Model lookup, this plugin's models first: only ``get_model`` imports one (and torch), after the name is checked."""

import functools
import importlib
import re

from recbole_fbsm.config.paths import recbole_dir
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
    "EASE": "recbole_fbsm.models.ease",
    "LightGCN": "recbole_fbsm.models.graph",
    "NGCF": "recbole_fbsm.models.graph",
}
# Sequential and knowledge-aware models need inputs (sequences, a KG) that the item split does not provide.
RECBOLE_SUBMODULES = ("general_recommender", "context_aware_recommender")


_CLASS = re.compile(r"^class (\w+)\(", re.M)


@functools.lru_cache(maxsize=1)
def recbole_model_files():
    """{model class name: module file} of RecBole's general and context-aware models, read without importing them."""
    models = {}
    for submodule in RECBOLE_SUBMODULES:
        for path in sorted((recbole_dir() / "model" / submodule).glob("*.py")):
            if path.stem.startswith("_"):
                continue
            for name in _CLASS.findall(path.read_text(encoding="utf-8", errors="replace")):
                if name.lower() == path.stem:
                    models[name] = path
    return models


def model_names():
    return list(PLUGIN_MODELS) + sorted(n for n in recbole_model_files() if n not in PLUGIN_MODELS)


def check_model_name(name):
    """An unknown model name is an error (with the closest names), decided without importing a model."""
    if name not in PLUGIN_MODELS and name not in recbole_model_files():
        available = model_names()
        hint = suggestion(name, available) or "."
        raise ColdStartError(
            f"unknown model {name!r}{hint} recbole-fbsm models lists the {len(available)} models it runs "
            "(this plugin's, RecBole's general and context-aware ones)."
        )


def get_model(name):
    """Return the model class called ``name``; a clear error listing the choices otherwise."""
    check_model_name(name)
    if name in PLUGIN_MODELS:
        return getattr(importlib.import_module(PLUGIN_MODELS[name]), name)
    path = recbole_model_files()[name]
    return getattr(importlib.import_module(f"recbole.model.{path.parent.name}.{path.stem}"), name)
