"""The paper's user-level investigation: for which users is model A better than model B? Both models rank the
same test split as the trainer's test evaluation does; docs/serve.md ("compare-users") lists the columns."""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.evaluation.collector import TieBreakingCollector
from recbole_fbsm.serve.loading import load_model

GROUPS = ("better", "same", "worse")


@dataclass
class UserComparison:
    name_a: str
    name_b: str
    k: int
    per_user: pd.DataFrame  # user_id, group, recall_a, recall_b, hits_a, hits_b, test_likes, train_likes
    groups: pd.DataFrame  # one row per group (better / same / worse: A vs B) and "all"


@torch.no_grad()
def per_user_recall(served, k=10):
    """Per test user: hits in the top ``k`` among the test split's items, test likes, Recall@k, scored in the
    trainer's batches with its tie breaking over the top max(``topk``), so that the lists are the trainer's."""
    served = load_model(served)
    model, config, device = served.model, served.config, served.device
    dataset = served.dataset
    items = served.split_items("test")
    candidates = torch.as_tensor(items, dtype=torch.long, device=device)
    like_users, like_items = served.split_likes("test")
    users, like_rows = np.unique(like_users, return_inverse=True)
    position = np.zeros(dataset.item_num, dtype=np.int64)
    position[items] = np.arange(len(items))
    relevant = sp.csr_matrix(
        (np.ones(len(like_rows), dtype=bool), (like_rows, position[like_items])), shape=(len(users), len(items))
    )
    topk = config["topk"]
    depth = max(int(k), *(topk if isinstance(topk, (list, tuple)) else [topk]))
    collector = TieBreakingCollector(config)
    step = max(int(config["eval_batch_size"]) // dataset.item_num, 1)
    hits = np.zeros(len(users), dtype=np.int64)
    for start in range(0, len(users), step):
        batch = torch.as_tensor(users[start : start + step], device=device)
        scores = model.score_candidates({model.USER_ID: batch}, candidates)  # as evaluation scores them
        # the trainer's lists: the top max(k, topk), tie keys of (user, item); fewer candidates: all of them
        top = collector.random_tie_topk(scores, depth, batch, candidates)[:, : int(k)].cpu().numpy()
        block = relevant[start : start + len(batch)].toarray()
        hits[start : start + len(batch)] = np.take_along_axis(block, top, axis=1).sum(1)
    test_counts = np.bincount(like_rows)
    return pd.DataFrame(
        {
            "user_id": served.user_tokens(users),
            "hits": hits,
            "test_likes": test_counts,
            "recall": hits / test_counts,
            "train_likes": served.training_likes_per_user()[users],
        }
    )


def check_same_split(a, b):
    """A ColdStartError unless ``a`` and ``b`` hold the same test split (its items and likes, by their ids)."""

    def test_split(served):
        users, liked = served.split_likes("test")
        return set(served.item_tokens(served.split_items("test"))), set(
            zip(served.user_tokens(users), served.item_tokens(liked))
        )

    (items_a, likes_a), (items_b, likes_b) = test_split(a), test_split(b)
    if items_a != items_b or likes_a != likes_b:
        raise ColdStartError(
            f"models {a.checkpoint} and {b.checkpoint} were not trained on the same split: their test splits differ "
            f"({len(items_a)} vs {len(items_b)} items, {len(likes_a)} vs {len(likes_b)} likes); the per-user "
            "comparison needs the same dataset, split seed and split ratios."
        )


def compare_users(a, b, k=10):
    """Per-user Recall@k of checkpoint ``a`` against ``b`` (``ServedModel`` or paths), grouped."""
    a, b = load_model(a), load_model(b)
    check_same_split(a, b)
    recall_a = per_user_recall(a, k)
    recall_b = per_user_recall(b, k)
    merged = recall_a.merge(
        recall_b[["user_id", "hits", "recall"]], on="user_id", suffixes=("_a", "_b"), validate="1:1"
    )
    merged["group"] = np.select(
        [merged["recall_a"] > merged["recall_b"], merged["recall_a"] == merged["recall_b"]], ["better", "same"], "worse"
    )
    per_user = merged[["user_id", "group", "recall_a", "recall_b", "hits_a", "hits_b", "test_likes", "train_likes"]]

    like_users, like_items = a.split_likes("test")
    like_frame = pd.DataFrame({"user_id": a.user_tokens(like_users), "item": like_items})
    item_likes = like_frame["item"].value_counts()
    rows = []
    for group in GROUPS + ("all",):
        members = per_user if group == "all" else per_user[per_user["group"] == group]
        group_likes = like_frame[like_frame["user_id"].isin(set(members["user_id"]))]
        items = group_likes["item"].unique()
        rows.append(
            {  # the mean of no rows is NaN
                "group": group,
                "users": len(members),
                "test_items": len(items),
                "likes_per_user": float(members["test_likes"].mean()),
                "train_likes_per_user": float(members["train_likes"].mean()),
                "likes_per_item": len(group_likes) / len(items) if len(items) else np.nan,
                "item_test_likes": float(item_likes.loc[items].mean()),
                "recall_a": float(members["recall_a"].mean()),
                "recall_b": float(members["recall_b"].mean()),
            }
        )
    return UserComparison(a.model_name, b.model_name, int(k), per_user.reset_index(drop=True), pd.DataFrame(rows))
