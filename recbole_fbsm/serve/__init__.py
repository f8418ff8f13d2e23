"""Put a trained model (``SERVED_MODELS``) to work on items that arrived after training: load it
(``load_model``), weigh new items (``read_new_items``), ``recommend``, ``explain`` a score, list FBSM's
``strongest_interactions``, ``compare_users`` of two models. The command line: ``recbole-fbsm serve --help``."""

from recbole_fbsm.serve.explain import Explanation, explain
from recbole_fbsm.serve.interactions import strongest_interactions
from recbole_fbsm.serve.loading import SERVED_MODELS, ServedModel, load_model
from recbole_fbsm.serve.new_items import NewItems, ServeWarning, UnknownTokensWarning, read_new_items
from recbole_fbsm.serve.recommend import Recommendations, recommend
from recbole_fbsm.serve.user_level import UserComparison, compare_users, per_user_recall

__all__ = [
    "SERVED_MODELS",
    "ServedModel",
    "load_model",
    "NewItems",
    "ServeWarning",
    "UnknownTokensWarning",
    "read_new_items",
    "Recommendations",
    "recommend",
    "Explanation",
    "explain",
    "strongest_interactions",
    "UserComparison",
    "compare_users",
    "per_user_recall",
]
