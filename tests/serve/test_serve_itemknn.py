"""ItemKNNCBF served: its run writes an artifact, the service scores as the model evaluates (dataset items, new
items, every scope), a like changes the next answer (new items' likes are neighbours), the command line works."""

import numpy as np
import pytest
from helpers import evaluation_scores, score_user, train_planted
from http_helpers import AUTH, TOKEN, call, live_service

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.serve.audience import audience_alpha
from recbole_fbsm.serve.explain import explain
from recbole_fbsm.serve.live import liked_items
from recbole_fbsm.serve.loading import load_model
from recbole_fbsm.serve.new_items import new_items_from_cells
from recbole_fbsm.serve.recommend import recommend
from recbole_fbsm.serve.user_level import compare_users

VARIANTS = {
    "dot": {},  # the defaults: linear, scored as a profile
    "cosine-knn": {"similarity": "cosine", "knn": 5, "similarity_exponent": 2.0, "feature_weighting": "tfidf"},
    "jaccard": {"similarity": "jaccard", "shrink": 0.5},  # every training item a neighbour, not linear
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    data, results = train_planted(tmp_path_factory.mktemp("itemknn"), VARIANTS, model="ItemKNNCBF")
    artifacts = {name: result["artifact_file"] for name, result in results.items()}
    return {"artifacts": artifacts, "data": data, "results": results}


def posted(data, token, new_id):
    features = data["features"][token]
    return {"id": new_id, "tokens": {"genre": [features["genre"]], "words": features["words"]}}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_run_writes_an_artifact_that_records_and_checks_its_settings(trained, variant):
    served = load_model(trained["artifacts"][variant])
    assert served.model_name == "ItemKNNCBF"
    for key, value in VARIANTS[variant].items():
        assert served.config[key] == value
    assert served.model.linear == (variant == "dot")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_service_scores_as_the_model_evaluates(trained, tmp_path, variant):
    """Training items (scope warm) and copies of the test items POSTed as new items (scope new) score as the
    trained model scores those dataset items in evaluation; scope all is the two together."""
    data = trained["data"]
    with live_service(trained["artifacts"][variant], str(tmp_path / "s.sqlite"), token=TOKEN) as (url, state):
        served = state.current().view.served
        test_items = served.split_items("test")
        copies = {f"copy_{t}": t for t in served.item_tokens(test_items)}
        items = [posted(data, t, c) for c, t in copies.items()]
        assert call(f"{url}/items", "POST", {"items": items}, headers=AUTH)[0] == 200
        user = "u1_3"
        snapshot = state.current()
        warm, warm_scores, _ = score_user(snapshot, user, "warm")
        expected = evaluation_scores(served, user, served.item_ids(list(warm)).numpy())
        assert np.allclose(warm_scores, expected, rtol=1e-5, atol=1e-7)
        new, new_scores, _ = score_user(snapshot, user, "new")
        assert set(new) == set(copies)
        expected = evaluation_scores(served, user, served.item_ids([copies[c] for c in new]).numpy())
        assert np.allclose(new_scores, expected, rtol=1e-5, atol=1e-7) and expected.max() > 0
        every, every_scores, _ = score_user(snapshot, user, "all")
        assert dict(zip(every, every_scores)) == {**dict(zip(warm, warm_scores)), **dict(zip(new, new_scores))}
        top = call(f"{url}/users/{user}/items?top=5&scope=all")[1]["items"]
        assert len(top) == 5 and top[0]["score"] == pytest.approx(float(every_scores.max()), rel=1e-6)
        assert call(f"{url}/model")[1]["model"] == "ItemKNNCBF"
        # the users a new item goes to: scored as the model scores its row for every training user, over |I_u|^alpha
        copy = next(iter(copies))
        status, answer = call(f"{url}/items/{copy}/users?top=3")
        assert status == 200 and len(answer["users"]) == 3
        for entry in answer["users"]:
            score = evaluation_scores(served, entry["user_id"], served.item_ids([copies[copy]]).numpy())[0]
            n_likes = len(liked_items(snapshot, entry["user_id"])[0])
            assert entry["score"] == pytest.approx(float(score) * n_likes ** -audience_alpha(served), rel=1e-5)
        status, answer = call(f"{url}/users/{user}/items/{copy}/explanation")
        assert status == 400 and "a ItemKNNCBF score is a sum of item-to-item similarities" in answer["error"]


def brute_force(served, liked_rows, candidate_rows, training_liked, candidate_items=None):
    """sum over liked j of sim_k(i, j) from the model's pieces: the training likes through the kept neighbours
    (``neighbour_similarities``), the other likes when at least as similar as i's k-th training neighbour."""
    model = served.model
    columns = None if candidate_items is None else model.neighbour_index[candidate_items]
    kept = model.neighbour_similarities(candidate_rows, columns)
    scores = kept[:, model.neighbour_index[training_liked]].sum(axis=1)
    if liked_rows.shape[0]:
        similar = model.row_similarities(candidate_rows, liked_rows)
        floor = -np.inf if model.knn is None else np.sort(kept, axis=1)[:, -model.knn][:, None]
        scores = scores + np.where(similar >= floor, similar, 0.0).sum(axis=1)
    return scores


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_like_changes_the_next_answer(trained, tmp_path, variant):
    """Likes of training items and of new items count at once (a like is a like: new items are neighbours), for a
    dataset user and for a user unknown at training; deleting the like takes it back."""
    data = trained["data"]
    with live_service(trained["artifacts"][variant], str(tmp_path / "s.sqlite"), token=TOKEN) as (url, state):
        fresh = data["held_out"][:4]
        twin = posted(data, fresh[0], "twin")  # the liked new item's twin: its nearest neighbour, whatever k
        items = [posted(data, t, t) for t in fresh] + [twin]
        assert call(f"{url}/items", "POST", {"items": items}, headers=AUTH)[0] == 200
        served = state.current().view.served
        training = served.training_items()
        for user in ("u2_1", "newcomer"):
            before = dict(zip(*score_user(state.current(), user, "all")[:2]))
            other_topic = [t for t in served.item_tokens(training) if data["topic_of"][t] == 0][:2]
            liked = other_topic + [fresh[0]]
            status, answer = call(f"{url}/users/{user}/likes", "POST", {"items": liked}, headers=AUTH)
            assert status == 200 and answer["added"] == liked
            snapshot = state.current()
            ids, scores, _ = score_user(snapshot, user, "all")
            after = dict(zip(ids, scores))
            assert not set(liked) & set(after)
            gain = {i: after[i] - before[i] for i in after}
            assert sum(g > 1e-6 for g in gain.values()) >= 5 and min(gain.values()) > -1e-6  # likes only add
            # the liked topic's items gain the most
            assert np.mean([g for i, g in gain.items() if data["topic_of"].get(i) == 0]) > np.mean(
                [g for i, g in gain.items() if data["topic_of"].get(i) != 0]
            )
            # as the model's pieces give them: training likes (the dataset user's and the stored) + the new item
            internal = served.dataset.field2token_id[served.uid_field].get(user, 0)
            liked_training = np.union1d(_training_likes(served, internal), served.item_ids(other_topic).numpy())
            warm = [i for i in ids if i not in snapshot.position]
            warm_items = served.item_ids(warm).numpy()
            new_row = snapshot.catalogue.matrix[[snapshot.position[fresh[0]]]]
            expected = brute_force(served, new_row, served.model.X[warm_items], liked_training, warm_items)
            assert np.allclose([after[i] for i in warm], expected, rtol=1e-5, atol=1e-7)
            # the new item liked is a neighbour of the other new items that are at least as similar as their k-th
            others = [i for i in ids if i in snapshot.position]
            rows = snapshot.catalogue.matrix[[snapshot.position[i] for i in others]]
            expected = brute_force(served, new_row, rows, liked_training)
            assert np.allclose([after[i] for i in others], expected, rtol=1e-5, atol=1e-7)
            # the users the twin goes to: the same score over |I_u|^alpha (serve/audience.py), stored likes counted
            listed = {e["user_id"]: e["score"] for e in call(f"{url}/items/twin/users?top=1000")[1]["users"]}
            n_likes = sum(map(len, liked_items(snapshot, user)))
            assert listed[user] == pytest.approx(
                float(after["twin"]) * n_likes ** -audience_alpha(snapshot.view.served), rel=1e-5, abs=1e-7
            )
            assert call(f"{url}/users/{user}/likes/{fresh[0]}", "DELETE", headers=AUTH)[0] == 200
            without = dict(zip(*score_user(state.current(), user, "all")[:2]))
            assert without["twin"] < after["twin"] - 1e-3


def _training_likes(served, internal):
    return served.dataset.model_inputs.likes.tocsr()[internal].indices if internal else np.zeros(0, np.int64)


def test_the_command_line_recommends_and_refuses_explain_in_one_line(trained):
    """recommend scores new items as the model scores the same rows; explain (feature pairs) is refused by name."""
    data = trained["data"]
    served = load_model(trained["artifacts"]["cosine-knn"])
    test_tokens = served.item_tokens(served.split_items("test"))[:5]
    cells = {
        "genre": [data["features"][t]["genre"] for t in test_tokens],
        "words": [" ".join(data["features"][t]["words"]) for t in test_tokens],
    }
    new = new_items_from_cells(served, [f"c_{t}" for t in test_tokens], cells, raw=False, source="test", warn=False)
    table = recommend(served, new, top=3, users=["u0_0"], for_items=False).for_users
    expected = evaluation_scores(served, "u0_0", served.item_ids(test_tokens).numpy())
    assert table["score"].tolist() == pytest.approx(sorted(expected, reverse=True)[:3], rel=1e-5)
    with pytest.raises(ColdStartError, match="ItemKNNCBF"):
        explain(served, "u0_0", test_tokens[0])


def test_compare_users_ranks_with_the_model_s_own_scores(trained):
    """Any served model compares (its score_candidates, as evaluation): the mean per-user recall is the run's test
    Recall@10."""
    comparison = compare_users(trained["artifacts"]["dot"], trained["artifacts"]["jaccard"], k=10)
    for name, column in (("dot", "recall_a"), ("jaccard", "recall_b")):
        expected = trained["results"][name]["test_result"]["recall@10"]
        assert comparison.per_user[column].mean() == pytest.approx(expected, abs=1e-4)
    assert comparison.groups.set_index("group")["users"]["all"] == len(comparison.per_user)
