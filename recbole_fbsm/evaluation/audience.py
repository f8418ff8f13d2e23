"""Who should see a new item, the other direction of item cold start: for each cold item of an evaluated split, the
training users ranked by the model's score of it; Recall@k and NDCG@k over the users who liked it there (items no
training user liked are left out), and the share of the top-k slots held by the heaviest 1% of users. The raw sum
over a user's likes hands every new item to the heaviest users, so the calibrated ranking divides each user's score
by |I_u|^alpha (FISM's normalisation), alpha chosen on the validation split; the artifact carries it for serving."""

import numpy as np
import scipy.sparse as sp
import torch

from recbole_fbsm.evaluation.collector import random_tie_topk
from recbole_fbsm.kernels.sparse import torch_csr

ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
HEAVY = 0.01  # the heaviest users' share of all users
BLOCK_CELLS = 1 << 24  # items x users scores per block


def calibration(likes, alpha):
    """Per user, the factor |I_u|^-alpha of their score (``likes``: each user's like count; at least 1 counts)."""
    return np.maximum(np.asarray(likes, dtype=np.float64), 1.0) ** -float(alpha)


def split_truth(split, users, n_items, n_users):
    """(the split's items liked by one of ``users``, items x users CSR of those likes)."""
    items, like_users, like_items = split
    row, column = np.full(n_items, -1), np.full(n_users, -1)
    row[items], column[users] = np.arange(len(items)), np.arange(len(users))
    keep = (row[like_items] >= 0) & (column[like_users] >= 0)
    cells = (np.ones(int(keep.sum())), (row[like_items[keep]], column[like_users[keep]]))
    truth = sp.csr_matrix(cells, shape=(len(items), len(users)))
    truth.data[:] = 1.0  # a like recorded twice counts once
    liked = np.diff(truth.indptr) > 0
    return items[liked], truth[liked]


@torch.no_grad()
def audience_metrics(model, features, likes_per_user, split, ks, seed, alphas=ALPHAS):
    """The audience rankings of one split, raw (alpha 0) and calibrated.

    Args:
        model: a content model (``score_feature_rows``).
        features: scipy CSR, items x features, weighted as the model's F.
        likes_per_user: training likes per user, shape [n_users].
        split: (its items, the users of its likes, the items of its likes), numpy arrays.
        ks: the cut-offs; the heaviest users' share is taken at the largest.
        seed: the tie-breaking seed (evaluation's ``tie_keys``).

    Returns:
        dict: {alpha: {"recall@k", "ndcg@k" per k, "heavy_share@K", "heavy_factor@K", "items"}}, {} without items.
    """
    users = np.flatnonzero(likes_per_user > 0)
    items, truth = split_truth(split, users, features.shape[0], len(likes_per_user))
    if not len(items):
        return {}
    top_k = min(max(ks), len(users))
    heavy = np.zeros(len(users), dtype=bool)
    heavy[np.argsort(-likes_per_user[users], kind="stable")[: max(1, round(HEAVY * len(users)))]] = True
    weights = {
        alpha: torch.as_tensor(calibration(likes_per_user[users], alpha), dtype=torch.float32) for alpha in alphas
    }
    F = getattr(model, "F", None)
    dtype = torch.float32 if F is None else F.values.dtype
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    user_ids = torch.as_tensor(users)
    hits, heavy_slots = {alpha: [] for alpha in alphas}, dict.fromkeys(alphas, 0)
    step = max(1, BLOCK_CELLS // len(users))
    for start in range(0, len(items), step):  # blocks of items, each scored against every user at once
        block = torch_csr(features[items[start : start + step]], device, dtype)
        scores = model.score_feature_rows(user_ids.to(device), block).T.float().cpu()
        relevant = truth[start : start + step].toarray() > 0
        item_ids = torch.as_tensor(items[start : start + step])
        for alpha in alphas:
            top = random_tie_topk(scores * weights[alpha], top_k, seed, item_ids, user_ids).numpy()
            hits[alpha].append(np.take_along_axis(relevant, top, axis=1))
            heavy_slots[alpha] += int(heavy[top].sum())
    n_relevant = np.diff(truth.indptr)
    discount = 1.0 / np.log2(np.arange(2, top_k + 2))
    report = {}
    for alpha in alphas:
        found = np.concatenate(hits[alpha])
        row = {"items": len(items)}
        for k in sorted({min(int(k), top_k) for k in ks}):
            ideal = np.cumsum(discount[:k])[np.minimum(n_relevant, k) - 1]
            row[f"recall@{k}"] = float(np.mean(found[:, :k].sum(1) / n_relevant))
            row[f"ndcg@{k}"] = float(np.mean(found[:, :k] @ discount[:k] / ideal))
        share = heavy_slots[alpha] / found.size
        row[f"heavy_share@{top_k}"], row[f"heavy_factor@{top_k}"] = share, share / (heavy.sum() / len(users))
        report[alpha] = row
    return report


def audience_report(model, config, train_dataset, valid_dataset, test_dataset):
    """A run's users direction: alpha chosen on validation's Recall@k (the valid metric's k; the smallest alpha of
    equals), the test split's raw and calibrated rankings. None for a model that scores no feature rows, the hybrid
    scenario, or splits without cold items liked by training users."""
    inputs = getattr(train_dataset, "model_inputs", None)
    datasets = (valid_dataset, test_dataset)
    if inputs is None or not hasattr(model, "score_feature_rows") or getattr(config, "hybrid", False):
        return None
    if any(d is None or getattr(d, "split_items", None) is None for d in datasets):
        return None
    ks, seed = [int(k) for k in config["topk"]], config["seed"]
    per_user = np.diff(inputs.likes.tocsr().indptr)
    features = inputs.features.matrix.tocsr()

    def split(d):
        return (
            np.asarray(d.split_items, dtype=np.int64),
            d.inter_feat[d.uid_field].numpy(),
            d.inter_feat[d.iid_field].numpy(),
        )

    valid = audience_metrics(model, features, per_user, split(valid_dataset), ks, seed)
    if not valid:
        return None
    key = str(config["valid_metric"]).lower()
    key = (
        key
        if key in valid[0.0]
        else f"recall@{max(int(k.split('@')[1]) for k in valid[0.0] if k.startswith('recall@'))}"
    )
    alpha = max(ALPHAS, key=lambda a: (valid[a][key], -a))
    test = audience_metrics(model, features, per_user, split(test_dataset), ks, seed, sorted({0.0, alpha}))
    return {
        "alpha": alpha,
        "chosen_on": f"valid {key}",
        "valid": {str(a): metrics for a, metrics in valid.items()},
        "test_raw": test.get(0.0),
        "test_calibrated": test.get(alpha),
    }
