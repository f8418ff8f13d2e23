"""ItemKNNCBF and BM25: every setting changes scores exactly as defined (checked against brute force on small
data), CoSim is its special case, and no validation or test item is ever a neighbour."""

import numpy as np
import pytest
import torch
from helpers import item_token_ids, tiny_word_dataset
from recbole.data.interaction import Interaction

from recbole_fbsm.quick_start import prepare, run

QUIET = {"state": "ERROR", "show_progress": False}


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """40 items with 1-8 words (repeats: term counts), 15 users."""
    monkeypatch.chdir(tmp_path)
    return tiny_word_dataset(tmp_path, seed=5, max_words=9, quiet=QUIET)


def counts_and_likes(dataset):
    """Term counts (items x vocabulary, by brute force over the token rows) and each user's training likes."""
    counts = np.zeros((dataset.item_num, len(dataset.field2id_token["words"])))
    for item in range(1, dataset.item_num):
        for token in item_token_ids(dataset, "words", item):
            if token:
                counts[item, token] += 1
    liked = {}
    for u, i in zip(dataset.inter_feat["user_id"].tolist(), dataset.inter_feat["item_id"].tolist()):
        liked.setdefault(u, set()).add(i)
    return counts, liked


def bm25(counts, train, k1, b):
    n = len(train)
    df = (counts[train] > 0).sum(axis=0)
    idf = np.where(df > 0, np.log(1 + (n - df + 0.5) / (df + 0.5)), 0.0)
    lengths = counts.sum(axis=1, keepdims=True)
    average = lengths[train].mean()
    with np.errstate(invalid="ignore"):
        tf = counts * (k1 + 1) / (counts + k1 * (1 - b + b * lengths / average))
    return np.nan_to_num(tf) * idf


def tfidf(counts, train):
    df = (counts[train] > 0).sum(axis=0)
    return counts * np.where(df > 0, np.log((1 + len(train)) / (1 + df)) + 1, 0.0)


def expected_similarities(model, weights, train, similarity, knn=None, exponent=1.0):
    """sim_k(i, j)^p by brute force (items x items). Where the k-th largest similarity of a row ties with
    others, any of the tied items may be kept: the model's choice is taken among them, once checked to be
    one (exactly k kept, every one strictly above the k-th value kept, the rest among its ties)."""
    n_items = weights.shape[0]
    sims = np.zeros((n_items, n_items))
    block = model.similarity_block(np.arange(n_items))
    for i in range(1, n_items):
        row = {j: similarity(weights[i], weights[j]) ** exponent for j in train if j != i}
        kept = set(row)
        if knn and len(row) > knn:
            kth = sorted(row.values(), reverse=True)[knn - 1]
            above = {j for j, v in row.items() if v > kth + 1e-9}
            tied = {j for j, v in row.items() if abs(v - kth) <= 1e-9}
            chosen = {int(model.neighbours[c]) for c in np.flatnonzero(block[i])}
            tied_chosen = chosen - above
            assert above <= chosen and tied_chosen <= tied | {j for j, v in row.items() if v == 0}
            kept = above | tied_chosen if kth > 0 else {j for j in above}
        for j in kept:
            sims[i, j] = row[j]
    return sims


def expected_scores(sims, liked, users):
    """sum over u's training likes j != i of sim_k(i, j)."""
    return np.array([[sum(sims[i, j] for j in liked[u] if j != i) for i in range(sims.shape[0])] for u in users])


def model_scores(model, users):
    return model.full_sort_predict(Interaction({"user_id": torch.tensor(users)})).view(len(users), -1).numpy()


def cosine(shrink):
    def sim(a, b):
        denominator = np.linalg.norm(a) * np.linalg.norm(b) + shrink
        return 0.0 if denominator == 0 else float(a @ b / denominator)

    return sim


@pytest.mark.parametrize(
    "settings, weighting, similarity, knn, exponent",
    [
        ({"feature_weighting": "tfidf", "similarity": "cosine"}, "tfidf", cosine(0), None, 1.0),
        (
            {"feature_weighting": "bm25", "bm25_k1": 1.2, "bm25_b": 0.75, "similarity": "cosine", "shrink": 3.0},
            "bm25",
            cosine(3.0),
            None,
            1.0,
        ),
        (
            {
                "feature_weighting": "bm25",
                "bm25_k1": 2.0,
                "bm25_b": 0.3,
                "similarity": "cosine",
                "knn": 4,
                "similarity_exponent": 2.0,
            },
            "bm25-2-0.3",
            cosine(0),
            4,
            2.0,
        ),
        (
            {"feature_weighting": "none", "similarity": "asymmetric", "asymmetric_alpha": 0.8, "shrink": 1.0},
            "tf",
            lambda a, b: float(a @ b / (np.sum(a * a) ** 0.8 * np.sum(b * b) ** 0.2 + 1.0)),
            None,
            1.0,
        ),
        (
            {"feature_weighting": "tfidf", "similarity": "jaccard", "shrink": 0.5},
            "binary",
            lambda a, b: float(
                np.sum((a > 0) & (b > 0)) / (np.sum(a > 0) + np.sum(b > 0) - np.sum((a > 0) & (b > 0)) + 0.5)
            ),
            None,
            1.0,
        ),
        (
            {
                "feature_weighting": "tfidf",
                "similarity": "tversky",
                "tversky_alpha": 0.2,
                "tversky_beta": 0.7,
                "knn": 3,
            },
            "binary",
            lambda a, b: float(
                np.sum((a > 0) & (b > 0))
                / (np.sum((a > 0) & (b > 0)) + 0.2 * np.sum((a > 0) & (b == 0)) + 0.7 * np.sum((b > 0) & (a == 0)))
            ),
            3,
            1.0,
        ),
    ],
)
def test_scores_equal_brute_force(tiny, settings, weighting, similarity, knn, exponent):
    config, model, (train_data, _, _) = prepare("ItemKNNCBF", "tiny", config_dict={**tiny, **settings})
    dataset = train_data._dataset
    counts, liked = counts_and_likes(dataset)
    train = list(dataset.split_items)
    weights = {
        "tfidf": lambda: tfidf(counts, train),
        "bm25": lambda: bm25(counts, train, 1.2, 0.75),
        "bm25-2-0.3": lambda: bm25(counts, train, 2.0, 0.3),
        "tf": lambda: counts,
        "binary": lambda: (counts > 0) * 1.0,
    }[weighting]()
    users = sorted(liked)
    expected = expected_scores(expected_similarities(model, weights, train, similarity, knn, exponent), liked, users)
    scores = model_scores(model, users)
    np.testing.assert_allclose(scores[:, 1:], expected[:, 1:], rtol=1e-5, atol=1e-6)


def test_knn_keeps_exactly_k_training_neighbours_and_never_another_split(tiny):
    """Every scored item's similarity row has at most k nonzeros, all on training items other than itself."""
    _, model, (train_data, valid_data, test_data) = prepare(
        "ItemKNNCBF", "tiny", config_dict={**tiny, "knn": 3, "similarity": "cosine", "feature_weighting": "bm25"}
    )
    train = set(train_data._dataset.split_items.tolist())
    every = np.arange(1, model.n_items)
    block = model.similarity_block(every)
    assert np.all((block != 0).sum(axis=1) <= 3)
    columns = model.neighbours[np.nonzero(block)[1]]
    assert set(columns.tolist()) <= train
    rows, cols = np.nonzero(block)
    assert not np.any(every[rows] == model.neighbours[cols])  # an item is never its own neighbour


def test_only_training_items_are_neighbours_even_when_users_liked_other_splits(tiny):
    """A user's validation/test likes never contribute: rescoring after dropping them changes nothing."""
    _, model, (train_data, valid_data, _) = prepare("ItemKNNCBF", "tiny", config_dict=tiny)
    train = set(train_data._dataset.split_items.tolist())
    assert model.likes.shape[1] == len(train)
    liked_columns = set(model.neighbours[model.likes.indices.numpy()].tolist())
    assert liked_columns <= train


def test_defaults_to_cosim_at_tfidf_no_shrink_all_neighbours(tiny):
    """ItemKNNCBF at (tfidf, cosine, shrink 0, every neighbour) is CoSim: same scores, same metrics."""
    settings = {**tiny, "feature_weighting": "tfidf", "similarity": "cosine", "shrink": 0, "knn": None}
    _, knn_model, (train_data, _, _) = prepare("ItemKNNCBF", "tiny", config_dict=settings)
    _, cosim, _ = prepare("CoSim", "tiny", config_dict=tiny)
    _, liked = counts_and_likes(train_data._dataset)
    users = sorted(liked)
    np.testing.assert_allclose(model_scores(knn_model, users), model_scores(cosim, users), rtol=1e-5, atol=1e-6)
    a = run("ItemKNNCBF", "tiny", config_dict=settings)
    b = run("CoSim", "tiny", config_dict=tiny)
    assert a["test_result"] == b["test_result"] and a["best_valid_result"] == b["best_valid_result"]


def test_dot_on_shrunk_rows_is_the_untrained_fbsm(tiny):
    """similarity: dot scores as FBSM's start on the same features (D = 1, V = 0): the neighbourhood
    baseline and FBSM's untrained model are one similarity."""
    settings = {**tiny, "feature_weighting": "bm25", "feature_shrink": 1.5, "similarity": "dot", "knn": None}
    _, knn_model, (train_data, _, _) = prepare("ItemKNNCBF", "tiny", config_dict=settings)
    _, fbsm, _ = prepare("FBSM", "tiny", config_dict={**settings, "init_std": 0.0})
    _, liked = counts_and_likes(train_data._dataset)
    users = sorted(liked)
    with torch.no_grad():
        np.testing.assert_allclose(model_scores(knn_model, users), model_scores(fbsm, users), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("knn", [None, 10**6])
def test_the_linear_defaults_score_as_the_similarity_blocks(tiny, monkeypatch, knn):
    """dot, every neighbour, p = 1: the scores x_i . f_u less the own term of a liked candidate equal the sums of
    similarity blocks, over every item (training items included: the estimation constraint), by full ranking,
    by the trainer's candidate scoring and by pair prediction."""
    from recbole_fbsm.models.itemknncbf import ItemKNNCBF

    settings = {**tiny, "feature_weighting": "bm25", "feature_shrink": 1.0, "similarity": "dot", "knn": knn}
    _, model, (train_data, _, _) = prepare("ItemKNNCBF", "tiny", config_dict=settings)
    assert model.linear
    _, liked = counts_and_likes(train_data._dataset)
    users = sorted(liked)
    others = np.setdiff1d(np.arange(1, model.n_items), model.neighbours)[:3]  # items of the other splits
    candidates = torch.as_tensor(np.r_[model.neighbours[:5], others])
    pairs = Interaction({"user_id": torch.tensor(users[:4]), "item_id": candidates[:4]})
    linear = (
        model_scores(model, users),
        model.score_candidates({"user_id": torch.tensor(users)}, candidates),
        model.predict(pairs),
    )
    monkeypatch.setattr(ItemKNNCBF, "linear", property(lambda self: False))
    blocks = (
        model_scores(model, users),
        model.score_candidates({"user_id": torch.tensor(users)}, candidates),
        model.predict(pairs),
    )
    for a, b in zip(linear, blocks):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert (np.asarray(linear[0]) != 0).any()


def test_predict_matches_full_ranking(tiny):
    _, model, (train_data, _, _) = prepare("ItemKNNCBF", "tiny", config_dict={**tiny, "knn": 5})
    users = torch.tensor([1, 2, 3, 3, 5])
    items = torch.tensor([4, 9, 4, 30, 11])
    full = model_scores(model, [1, 2, 3, 5])
    expected = full[[0, 1, 2, 2, 3], items.numpy()]
    predicted = model.predict(Interaction({"user_id": users, "item_id": items})).numpy()
    np.testing.assert_allclose(predicted, expected, rtol=1e-6)


def test_bad_similarity_is_one_error_line(tiny):
    import subprocess
    import sys

    from helpers import RUN_RECBOLE

    done = subprocess.run(
        [
            sys.executable,
            str(RUN_RECBOLE),
            "--model=ItemKNNCBF",
            "--dataset=tiny",
            f"--data_path={tiny['data_path']}",
            "--similarity=cosin",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "--similarity" in done.stderr and "cosine" in done.stderr
