"""DropoutNet, Heater, ALDI and the hybrid FBSM served from a hybrid-scenario artifact: the service scores the
training items as the model's evaluation does (warm input / teacher / identity features), new items by their
content, and ranks them together."""

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import evaluation_scores, score_user, train_planted
from http_helpers import AUTH, TOKEN, call, live_service

SMALL = {"warm_embedding_size": 8, "warm_epochs": 20, "hidden_sizes": [16], "n_experts": 2, "epochs": 1}
MODELS = {
    "DropoutNet": SMALL,
    "Heater": SMALL,
    "ALDI": SMALL,
    "FBSM": {"identity_features": True, "epochs": 2, "rank": 3, "init_std": 0.1},
}
HYBRID = {"cold_start_scenario": "hybrid", "metrics": ["Recall"], "topk": [5], "valid_metric": "recall@5"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    data, results = train_planted(tmp_path_factory.mktemp("hybrid_two_tower"), MODELS, **HYBRID)
    return {"artifacts": {name: result["artifact_file"] for name, result in results.items()}, "data": data}


def close(scores, expected):
    """Equal up to float32 rounding, measured on the scale of ``expected`` (a short run's scores are small)."""
    return np.allclose(scores, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))


@pytest.mark.parametrize("name", MODELS)
def test_the_service_scores_warm_and_new_items_as_the_hybrid_evaluation(trained, tmp_path, name):
    """Training items (scope warm) score as evaluation scores them, not by content alone; copies of the cold test
    items POSTed as new items score as evaluation scores those cold items (content); scope all is both."""
    data = trained["data"]
    with live_service(trained["artifacts"][name], str(tmp_path / "s.sqlite"), token=TOKEN) as (url, state):
        served = state.current().view.served
        assert served.config["cold_start_scenario"] == "hybrid"
        training = set(served.training_items().tolist())
        cold_test = [t for t in served.split_items("test").tolist() if t not in training]
        copies = {f"copy_{t}": t for t in served.item_tokens(cold_test)}
        items = [
            {"id": c, "tokens": {"genre": [data["features"][t]["genre"]], "words": data["features"][t]["words"]}}
            for c, t in copies.items()
        ]
        assert call(f"{url}/items", "POST", {"items": items}, headers=AUTH)[0] == 200
        user, snapshot = "u1_3", state.current()

        warm, warm_scores, _ = score_user(snapshot, user, "warm")
        warm_ids = served.item_ids(list(warm))
        assert close(warm_scores, evaluation_scores(served, user, warm_ids))
        is_content = [not column.startswith("identity:") for column in served.features.names]  # hybrid FBSM's: zeroed
        content = served.features.matrix[warm_ids.numpy()] @ sp.diags(np.asarray(is_content, dtype=np.float64))
        rows = served.feature_rows(sp.csr_matrix(content))
        content_only = served.model.score_feature_rows(served.user_ids([user]), rows)[0].numpy()
        assert not close(warm_scores, content_only)  # the warm path, not content alone

        new, new_scores, _ = score_user(snapshot, user, "new")
        assert set(new) == set(copies) and len(new) > 0
        expected = evaluation_scores(served, user, served.item_ids([copies[c] for c in new]).numpy())
        assert close(new_scores, expected)

        every, every_scores, _ = score_user(snapshot, user, "all")
        assert dict(zip(every, every_scores)) == {**dict(zip(warm, warm_scores)), **dict(zip(new, new_scores))}
        top = call(f"{url}/users/{user}/items?top=5&scope=all")[1]["items"]
        assert len(top) == 5 and top[0]["score"] == pytest.approx(float(every_scores.max()), rel=1e-6)
