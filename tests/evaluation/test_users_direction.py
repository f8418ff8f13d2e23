"""The users direction (evaluation/audience.py): its metrics against a brute force one item and one user at a time,
ties ordered by evaluation's tie keys; alpha chosen on validation only; a run's record and artifact carry it."""

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from helpers import dataset_config, write_dataset

from recbole_fbsm.evaluation.audience import audience_metrics
from recbole_fbsm.evaluation.collector import tie_keys
from recbole_fbsm.quick_start import run


class RowScorer(torch.nn.Module):
    """A content model whose score of a feature row f for user u is p_u . f (integer values: many ties)."""

    def __init__(self, preferences):
        super().__init__()
        self.preferences = torch.as_tensor(preferences, dtype=torch.float32)

    def score_feature_rows(self, users, item_matrix):
        return self.preferences[users] @ item_matrix.to_dense().T


def brute_force(preferences, features, likes_per_user, split, k, alpha, seed):
    items, like_users, like_items = split
    users = [u for u in range(len(likes_per_user)) if likes_per_user[u] > 0]
    liked_by = {}
    for user, item in zip(like_users, like_items):
        if likes_per_user[user] > 0 and item in items:
            liked_by.setdefault(int(item), set()).add(int(user))
    heavy = max(users, key=lambda u: likes_per_user[u])
    recalls, ndcgs, slots = [], [], 0
    for item in sorted(liked_by, key=list(items).index):

        def order(u, item=item):
            score = float(preferences[u] @ features[item].toarray().ravel()) * max(likes_per_user[u], 1) ** -alpha
            return -np.float32(score), -float(tie_keys(seed, torch.tensor(item), torch.tensor(u)))

        top = sorted(users, key=order)[:k]
        gains = [1 / np.log2(rank + 2) for rank, u in enumerate(top) if u in liked_by[item]]
        recalls.append(len(gains) / len(liked_by[item]))
        ndcgs.append(sum(gains) / sum(1 / np.log2(r + 2) for r in range(min(k, len(liked_by[item])))))
        slots += heavy in top
    return np.mean(recalls), np.mean(ndcgs), slots / (len(recalls) * k)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_users_direction_metrics_equal_a_brute_force(alpha):
    rng = np.random.default_rng(0)
    n_users, n_items, n_features = 60, 40, 6
    preferences = rng.integers(0, 3, size=(n_users, n_features))
    features = sp.csr_matrix(rng.integers(0, 2, size=(n_items, n_features)).astype(np.float64))
    likes_per_user = rng.integers(0, 5, size=n_users)
    likes_per_user[7] = 50  # the heaviest user, alone in the heaviest 1%
    items = np.arange(20, 40)
    like_users, like_items = rng.integers(0, n_users, size=120), rng.integers(0, n_items, size=120)
    split = (items, like_users, like_items)
    report = audience_metrics(RowScorer(preferences), features, likes_per_user, split, [3, 5], seed=11, alphas=[alpha])
    row = report[alpha]
    for k in (3, 5):
        recall, ndcg, share = brute_force(preferences, features, likes_per_user, split, k, alpha, seed=11)
        assert (row[f"recall@{k}"], row[f"ndcg@{k}"]) == pytest.approx((recall, ndcg), abs=1e-12)
    assert row["heavy_share@5"] == pytest.approx(share, abs=1e-12)
    assert row["heavy_factor@5"] == pytest.approx(share * np.count_nonzero(likes_per_user))


def test_a_run_records_the_users_direction_and_its_artifact_carries_alpha(tmp_path, monkeypatch):
    """alpha is the best on validation (the smallest of equals), the test figures are alpha's and 0's."""
    data = write_dataset(tmp_path, implicit=True, user_liking_everything=True)
    monkeypatch.chdir(tmp_path)
    result = run("CoSim", data.name, config_dict=dataset_config(data))
    audience = json.loads(open(result["result_file"]).read())["audience"]
    key = audience["chosen_on"].split()[-1]
    valid = {float(a): m[key] for a, m in audience["valid"].items()}
    assert audience["alpha"] == min(a for a in valid if valid[a] == max(valid.values()))
    assert audience["test_raw"][key] >= 0 and audience["test_calibrated"]["items"] == audience["test_raw"]["items"]
    from recbole_fbsm.artifact.model_file import read_artifact

    assert read_artifact(result["artifact_file"])["training"]["audience_alpha"] == audience["alpha"]


def test_the_run_command_prints_the_users_direction(monkeypatch, capsys):
    from recbole_fbsm import quick_start
    from recbole_fbsm.cli import run as run_command

    audience = {
        "alpha": 0.5,
        "chosen_on": "valid recall@10",
        "test_raw": {"recall@10": 0.1},
        "test_calibrated": {"recall@10": 0.125},
    }
    result = {"best_valid_result": {}, "test_result": {"recall@10": 0.2}, "audience": audience}
    monkeypatch.setattr(quick_start, "run", lambda *args, **kwargs: result)
    assert run_command.run(["--model=CoSim"]) == 0
    assert (
        "who should see a new item (test recall@10 over the users who liked it): 0.1250 with scores / |I_u|^0.5 "
        "(alpha chosen on validation), raw sum 0.1000"
    ) in capsys.readouterr().out
