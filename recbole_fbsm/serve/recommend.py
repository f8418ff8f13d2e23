"""The top users for each brand-new item and the top new items for users, ties broken at random (seeded), never
by internal id, which follows popularity in RecBole."""

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.serve.loading import load_model
from recbole_fbsm.serve.new_items import NewItems, ServeWarning, read_new_items
from recbole_fbsm.serve.scoring import RunningTopK, iter_profile_scores, ranked, scipy_to_torch_csr


@dataclass
class Recommendations:
    for_items: pd.DataFrame  # item_id, rank, user_id, score: the top users of each new item
    for_users: pd.DataFrame  # user_id, rank, item_id, score: the top new items of each user
    new_items: NewItems


def users_with_likes(served):
    """Internal ids of the users with at least one training like (the others score 0 everywhere)."""
    likes = served.training_likes_per_user()
    return torch.as_tensor(np.flatnonzero(likes > 0), dtype=torch.long, device=served.device)


def recommend(served, new_items, top=10, users=None, for_items=True, for_users=True, seed=None, raw_text=None):
    """Top-``top`` lists for brand-new items (a ``NewItems`` or a file, see ``read_new_items``) of ``served`` (a
    ``ServedModel`` or a model file): for each new item the users with training likes to show it to, and for each
    of ``users`` (default: every user with a training like) the new items. ``seed`` defaults to the model's."""
    served = load_model(served)
    if not isinstance(new_items, NewItems):
        new_items = read_new_items(served, new_items, raw_text=raw_text)
    if int(top) < 1:
        raise ColdStartError(f"top: expected a positive number of entries per list; got {top}.")
    seed = served.config["seed"] if seed is None else seed
    model = served.model
    matrix = scipy_to_torch_csr(new_items.matrix, served.device, served.row_dtype)
    item_tokens = np.asarray(new_items.tokens, dtype=object)

    items_table = None
    if for_items:
        candidates = users_with_likes(served)
        best = RunningTopK(len(new_items), int(top), seed=seed, device=served.device)
        for start, scores in iter_profile_scores(model, candidates, matrix):
            best.add(scores.T, candidates[start : start + scores.shape[0]])
        ids = best.ids.cpu().numpy()
        user_tokens = np.asarray(served.user_tokens(ids.ravel()), dtype=object).reshape(ids.shape)
        items_table = _long_table("item_id", item_tokens, "user_id", user_tokens, best.scores)

    users_table = None
    if for_users:
        if users is None:
            chosen = users_with_likes(served)
        else:
            chosen = served.user_ids(users)
            ids = chosen.cpu().numpy()
            empty = served.user_tokens(ids[served.training_likes_per_user()[ids] == 0])
            if empty:
                warnings.warn(
                    f"{len(empty)} user(s) have no training like, so every new item scores 0 for them and their "
                    f"lists are in random order: {', '.join(empty[:10])}.",
                    ServeWarning,
                    stacklevel=2,
                )
        generator = torch.Generator().manual_seed(int(seed) + 1)
        ids, values = [], []
        for _, scores in iter_profile_scores(model, chosen, matrix):
            keys = torch.rand(scores.shape, generator=generator).to(scores.device)
            best = ranked(scores, keys, int(top))
            ids.append(best)
            values.append(scores.gather(1, best))
        ids = torch.cat(ids).cpu().numpy() if ids else np.zeros((0, 0), dtype=np.int64)
        values = torch.cat(values) if values else torch.zeros(0, 0)
        user_tokens = np.asarray(served.user_tokens(chosen.cpu().numpy()), dtype=object)
        users_table = _long_table("user_id", user_tokens, "item_id", item_tokens[ids], values)
    return Recommendations(items_table, users_table, new_items)


def _long_table(key_name, keys, value_name, values, scores):
    """One row per (key, rank): key, rank, value, score."""
    n_rows, k = values.shape if len(values.shape) == 2 else (len(keys), 0)
    scores = scores.detach().cpu().double().numpy()
    return pd.DataFrame(
        {
            key_name: np.repeat(keys, k),
            "rank": np.tile(np.arange(1, k + 1), n_rows),
            value_name: np.asarray(values, dtype=object).ravel(),
            "score": scores.ravel(),
        }
    )
