"""Put a trained model (``SERVED_MODELS``) to work on items that arrived after training.

- ``load_model``: a model artifact (.fbsm) or training checkpoint (.pth) back to a ready model;
- ``read_new_items``: an ``.item`` file of brand-new items, weighted exactly as the training features;
- ``recommend``: top users for each new item and top new items for users;
- ``explain``: a (user, item) score broken into feature pairs and liked training items;
- ``strongest_interactions``: FBSM's largest learned feature interactions, without a dense matrix;
- ``compare_users``: the paper's user-level comparison of two checkpoints on the same test split.

The command line: ``recbole-fbsm serve --help``; docs/serve.md.
"""

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
