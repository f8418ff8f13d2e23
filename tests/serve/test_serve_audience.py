"""Who should see a new item, on a trained model (evaluation/audience.py, serve/audience.py): the users direction's
metrics over a served model's scores against a brute force, the heaviest users' share of the top-k slots, and the
service's ranking by the calibrated score. One CoSim model on a small generated dataset whose user ``u_all`` likes
every item (the one heaviest user)."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import dataset_config, score_new_items, score_user, write_dataset
from http_helpers import call, live_service

from recbole_fbsm.artifact.model_file import write_artifact
from recbole_fbsm.evaluation.audience import audience_metrics
from recbole_fbsm.evaluation.collector import tie_keys
from recbole_fbsm.quick_start import run
from recbole_fbsm.serve import load_model
from recbole_fbsm.serve.audience import DEFAULT_ALPHA
from recbole_fbsm.serve.loading import read_model_file


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("audience")
    data = write_dataset(root, implicit=True, user_liking_everything=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        result = run("CoSim", data.name, config_dict=dataset_config(data))
    return data, result["artifact_file"]


def brute_force(served, split, k, alpha):
    """Recall@k, NDCG@k and u_all's share of the top-k slots, one item and one user at a time."""
    likes = served.training_likes_per_user()
    users = [u for u in range(len(likes)) if likes[u] > 0]
    liked_by = {}
    for user, item in zip(*served.split_likes(split)):
        if likes[user] > 0:
            liked_by.setdefault(int(item), set()).add(users.index(user))
    items = sorted(liked_by)  # the split's cold items a training user liked, in id order: as the keys are drawn
    scores = score_new_items(served, SimpleNamespace(matrix=served.features.matrix.tocsr()[items]), users).T
    weights = torch.tensor([max(likes[u], 1) ** -alpha for u in users], dtype=torch.float32)
    # ties by evaluation's keys of (item, user), as evaluation.audience orders them
    keys = tie_keys(int(served.config["seed"]), torch.tensor(items)[:, None], torch.tensor(users)[None, :])
    heaviest = users.index(int(served.user_ids(["u_all"])[0]))
    recalls, ndcgs, heavy = [], [], 0
    for j, item in enumerate(items):
        calibrated = (scores[j] * weights).tolist()
        top = sorted(range(len(users)), key=lambda u: (-calibrated[u], -float(keys[j, u])))[:k]
        gains = [1 / np.log2(rank + 2) for rank, u in enumerate(top) if u in liked_by[item]]
        recalls.append(len(gains) / len(liked_by[item]))
        ndcgs.append(sum(gains) / sum(1 / np.log2(r + 2) for r in range(min(k, len(liked_by[item])))))
        heavy += heaviest in top
    return np.mean(recalls), np.mean(ndcgs), heavy / (len(items) * k), len(users)


@pytest.mark.parametrize("split", ["valid", "test"])
def test_users_direction_metrics_equal_a_brute_force(trained, split):
    served = load_model(trained[1])
    likes = served.training_likes_per_user()
    items = np.setdiff1d(served.split_items(split), served.training_items())  # the split's cold items
    truth = (items, *served.split_likes(split))
    seed = int(served.config["seed"])
    report = audience_metrics(served.model, served.features.matrix.tocsr(), likes, truth, [5], seed, (0.0, 0.5, 1.0))
    assert np.argmax(likes) == int(served.user_ids(["u_all"])[0]) and np.sort(likes)[-2] < likes.max()
    for alpha, row in report.items():
        recall, ndcg, share, n_users = brute_force(served, split, 5, alpha)
        assert n_users < 150  # the heaviest 1% is one user: u_all
        got = (row["recall@5"], row["ndcg@5"], row["heavy_share@5"])
        assert got == pytest.approx((recall, ndcg, share), abs=1e-9)
        assert row["heavy_factor@5"] == pytest.approx(share * n_users)
    assert report[0.0]["heavy_share@5"] > report[1.0]["heavy_share@5"]  # the raw sum favours the heaviest user


@pytest.mark.parametrize("alpha", [0.0, 1.0, None])
def test_the_service_ranks_users_by_their_calibrated_score(trained, tmp_path, alpha):
    data, artifact = trained
    content = read_model_file(artifact)
    assert content["training"]["audience_alpha"] is not None  # the run chose it
    content["training"]["audience_alpha"] = alpha  # None: an artifact without one
    artifact = str(write_artifact(tmp_path / "model.fbsm", content))
    features = data.item_features[data.item_tokens[0]]
    with live_service(artifact, str(tmp_path / "s.sqlite")) as (url, state):
        assert call(f"{url}/items", "POST", {"items": [{"id": "fresh", "tokens": features}]})[0] == 200
        listed = {e["user_id"]: e["score"] for e in call(f"{url}/items/fresh/users?top=1000")[1]["users"]}
        snapshot = state.current()
    likes = snapshot.view.likes
    for user in ("u_all", "u000", "u001"):
        ids, scores, _ = score_user(snapshot, user, "new")
        n_likes = likes[snapshot.view.dataset_user(user)].nnz
        expected = float(scores[list(ids).index("fresh")]) * n_likes ** -(DEFAULT_ALPHA if alpha is None else alpha)
        assert listed[user] == pytest.approx(expected, rel=1e-5, abs=1e-7)
