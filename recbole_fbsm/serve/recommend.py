"""The top users for each brand-new item and the top new items for users, scored by the model's
``score_feature_rows`` and ranked by evaluation's top-k (ties by a seeded hash, never by internal id, which
follows popularity in RecBole)."""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from recbole_fbsm.evaluation.collector import TieBreakingCollector
from recbole_fbsm.serve.loading import load_model
from recbole_fbsm.serve.new_items import NewItems, read_new_items

BLOCK_CELLS = 1 << 24  # users x items cells of one block of scores


@dataclass
class Recommendations:
    for_items: pd.DataFrame  # item_id, rank, user_id, score: the top users of each new item
    for_users: pd.DataFrame  # user_id, rank, item_id, score: the top new items of each user
    new_items: NewItems


def top_lists(served, users, matrix, top, by_item, seed):
    """(ids, scores) of the ``top`` best users of each new item (``by_item``) or new items of each of ``users``
    (internal ids), the new items' weighted rows ``matrix`` scored in blocks of ``BLOCK_CELLS`` by the model's
    ``score_feature_rows`` and ranked by evaluation's ``random_tie_topk``."""
    collector = TieBreakingCollector(served.config)
    collector.tie_seed = seed
    n_rows, n_columns = (matrix.shape[0], len(users)) if by_item else (len(users), matrix.shape[0])
    columns = users if by_item else torch.arange(n_columns, device=served.device)
    ids, values = (
        [torch.zeros(0, min(top, n_columns), dtype=torch.long)],
        [torch.zeros(0, min(top, n_columns), dtype=torch.float64)],
    )
    step = max(1, BLOCK_CELLS // max(n_columns, 1))
    for start in range(0, n_rows, step):
        if by_item:
            rows = torch.arange(start, min(start + step, n_rows), device=served.device)
            scores = served.model.score_feature_rows(users, served.feature_rows(matrix[start : start + step])).T
        else:
            rows = users[start : start + step]
            scores = served.model.score_feature_rows(rows, served.feature_rows(matrix))
        best = collector.random_tie_topk(scores, top, rows, columns)
        ids.append(columns[best].cpu())
        values.append(scores.gather(1, best).double().cpu())
    return torch.cat(ids).numpy(), torch.cat(values)


def recommend(served, new_items, top=10, users=None, for_items=True, for_users=True, seed=None, raw_text=None):
    """Top-``top`` lists for brand-new items (a ``NewItems`` or a file, see ``read_new_items``) of ``served`` (a
    ``ServedModel`` or a model file): for each new item the users with training likes to show it to, and for each
    of ``users`` (default: every user with a training like) the new items. ``seed`` defaults to the model's."""
    served = load_model(served)
    if not isinstance(new_items, NewItems):
        new_items = read_new_items(served, new_items, raw_text=raw_text)
    seed = served.config["seed"] if seed is None else seed
    likes = served.training_likes_per_user()
    with_likes = torch.as_tensor(np.flatnonzero(likes > 0), dtype=torch.long, device=served.device)
    item_tokens = np.asarray(new_items.tokens, dtype=object)
    items_table = users_table = None
    if for_items:
        ids, scores = top_lists(served, with_likes, new_items.matrix, int(top), True, seed)
        user_tokens = np.asarray(served.user_tokens(ids.ravel()), dtype=object).reshape(ids.shape)
        items_table = _long_table("item_id", item_tokens, "user_id", user_tokens, scores)
    if for_users:
        chosen = with_likes if users is None else served.user_ids(users)
        ids, scores = top_lists(served, chosen, new_items.matrix, int(top), False, seed)
        user_tokens = np.asarray(served.user_tokens(chosen.cpu().numpy()), dtype=object)
        users_table = _long_table("user_id", user_tokens, "item_id", item_tokens[ids], scores)
    return Recommendations(items_table, users_table, new_items)


def _long_table(key_name, keys, value_name, values, scores):
    """One row per (key, rank): key, rank, value, score."""
    n_rows, k = values.shape
    return pd.DataFrame(
        {
            key_name: np.repeat(keys, k),
            "rank": np.tile(np.arange(1, k + 1), n_rows),
            value_name: np.asarray(values, dtype=object).ravel(),
            "score": scores.double().numpy().ravel(),
        }
    )
