"""FBSM, UFSM and CoSim: the paper's formulas, the estimation constraint, and planted interactions."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from helpers import item_token_ids, tiny_word_dataset
from recbole.data.interaction import Interaction
from synthetic import planted_interactions

from recbole_fbsm.kernels.sparse import TorchCsr
from recbole_fbsm.models import base
from recbole_fbsm.quick_start import prepare, run
from recbole_fbsm.training.trainer import get_trainer, load_checkpoint

QUIET = {"state": "ERROR", "show_progress": False}


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A small random dataset with words, in tmp_path."""
    monkeypatch.chdir(tmp_path)
    return tiny_word_dataset(tmp_path, seed=3, max_words=5, quiet=QUIET)


def build(model, config_dict):
    config, model, loaders = prepare(model, "tiny", config_dict=config_dict)
    return model, loaders


def randomise_features(model, seed=0, dtype=torch.float64):
    """Swap the model's features for random real-valued sparse ones (F_U = R F, as the model builds it)."""
    rng = np.random.default_rng(seed)
    n_items, n_features = model.F.shape
    F = sp.random(n_items, n_features, density=0.3, random_state=rng, format="csr")
    F.data = rng.normal(size=F.nnz)
    F = sp.csr_matrix(sp.diags(np.r_[0.0, np.ones(n_items - 1)]) @ F)  # row 0: RecBole's padding item
    likes = sp.csr_matrix(
        (model.R.values.numpy(), model.R.indices.numpy(), model.R.indptr.numpy()), shape=model.R.shape
    )
    model.F, model.F_U = TorchCsr(F, dtype), TorchCsr(likes @ F, dtype)
    model._class_matrices = None  # the training path's rows of F, built again from the new F
    model.to(dtype)
    return F.toarray(), likes.toarray()


def dense_similarity(model, user):
    """W_u as a dense features x features matrix (tests only: the models never form it)."""
    name = type(model).__name__
    if name == "FBSM":
        V = model.V.detach().numpy()
        return np.diag(model.D.detach().numpy()) + V @ V.T
    if name == "UFSM":
        return np.diag((model.M[user] @ model.W).detach().numpy())
    return np.eye(model.n_features)


def bpr_difference(model, u, i, j):
    """r_ui - r_uj from the training path's scores of every training item (``class_scores``)."""
    scores, _ = model.class_scores(torch.tensor([u]))
    rows = torch.searchsorted(model.training_items, torch.tensor([i, j]))
    return scores[rows[0], 0] - scores[rows[1], 0]


def test_fbsm_gradients_equal_the_papers_closed_forms(tiny):
    model, _ = build("FBSM", {**tiny, "rank": 3})
    F, likes = randomise_features(model)
    torch.manual_seed(0)
    with torch.no_grad():
        model.D.copy_(torch.randn_like(model.D))
        model.V.copy_(torch.randn_like(model.V))
    checked = 0
    for u in range(1, likes.shape[0]):
        liked = np.flatnonzero(likes[u])
        other = np.setdiff1d(model.training_items.numpy(), liked)
        if not len(liked) or not len(other):
            continue
        i, j = liked[0], other[u % len(other)]
        model.zero_grad()
        r_uij = bpr_difference(model, u, i, j)
        r_uij.backward()
        f_u, f_i, f_j = likes[u] @ F, F[i], F[j]  # f_u includes i
        delta = f_i - f_j
        V = model.V.detach().numpy().T  # the paper's h x n_F matrix; column p is v_p
        W = np.diag(model.D.detach().numpy()) + V.T @ V
        assert r_uij.item() == pytest.approx(f_i @ W @ (f_u - f_i) - f_j @ W @ f_u, rel=1e-10, abs=1e-10)
        grad_D = delta * f_u - f_i * f_i
        grad_V = np.outer(V @ f_u, delta) + np.outer(V @ delta, f_u) - 2 * np.outer(V @ f_i, f_i)
        np.testing.assert_allclose(model.D.grad.numpy(), grad_D, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(model.V.grad.numpy().T, grad_V, rtol=1e-8, atol=1e-8)
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("name", ["FBSM", "UFSM", "CoSim"])
def test_scores_respect_the_estimation_constraint(tiny, name):
    """score(u, i) = sum over u's training likes j != i of f_i^T W_u f_j, for likes and non-likes alike."""
    model, _ = build(name, {**tiny, "rank": 2, "n_functions": 2})
    F, likes = randomise_features(model, seed=1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter))
    users = torch.arange(1, likes.shape[0])
    full = model.full_sort_predict(Interaction({"user_id": users})).view(len(users), -1).detach().numpy()
    for row, u in enumerate(users.tolist()):
        W = dense_similarity(model, u)
        liked = np.flatnonzero(likes[u])
        for i in range(1, F.shape[0]):
            expected = sum(F[i] @ W @ F[j] for j in liked if j != i)
            assert full[row, i] == pytest.approx(expected, rel=1e-9, abs=1e-9)
        pairs = Interaction({"user_id": torch.full((len(liked),), u), "item_id": torch.as_tensor(liked)})
        predicted = model.predict(pairs).detach().numpy()
        np.testing.assert_allclose(predicted, full[row, liked], rtol=1e-9, atol=1e-9)
    # every (user, item) pair at once, shuffled: few users, many items each (the dense-profile path that
    # RecBole's dynamic negative sampling takes), likes and non-likes mixed
    grid_users, grid_items = torch.meshgrid(users, torch.arange(1, F.shape[0]), indexing="ij")
    order = torch.randperm(grid_users.numel(), generator=torch.Generator().manual_seed(0))
    pairs = Interaction({"user_id": grid_users.reshape(-1)[order], "item_id": grid_items.reshape(-1)[order]})
    expected = full[(grid_users.reshape(-1)[order] - 1).numpy(), grid_items.reshape(-1)[order].numpy()]
    np.testing.assert_allclose(model.predict(pairs).detach().numpy(), expected, rtol=1e-9, atol=1e-9)


def test_cosim_equals_a_brute_force_double_loop(tiny):
    """TF-IDF (document frequencies on training items), cosine, summed over the other training likes."""
    model, (train_data, _, _) = build("CoSim", tiny)
    dataset = train_data._dataset
    vocabulary_size = len(dataset.field2id_token["words"])
    counts = np.zeros((dataset.item_num, vocabulary_size))
    for item in range(1, dataset.item_num):
        for token in item_token_ids(dataset, "words", item):
            if token:
                counts[item, token] += 1
    train_items = dataset.split_items
    df = (counts[train_items] > 0).sum(axis=0)
    idf = np.where(df > 0, np.log((1 + len(train_items)) / (1 + df)) + 1, 0.0)
    tfidf = counts * idf
    liked = {}
    for u, i in zip(dataset.inter_feat["user_id"].tolist(), dataset.inter_feat["item_id"].tolist()):
        liked.setdefault(u, set()).add(i)
    users = sorted(liked)
    scores = model.full_sort_predict(Interaction({"user_id": torch.tensor(users)})).view(len(users), -1).numpy()

    def cosine(a, b):
        norm = np.linalg.norm(a) * np.linalg.norm(b)
        return 0.0 if norm == 0 else float(a @ b / norm)

    for row, u in enumerate(users):
        for i in range(1, dataset.item_num):
            expected = sum(cosine(tfidf[i], tfidf[j]) for j in liked[u] if j != i)
            assert scores[row, i] == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_fbsm_finds_planted_feature_interactions_that_cosim_and_ufsm_cannot(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    planted_interactions(tmp_path / "data", "planted", split_seed=2020)
    common = {"data_path": str(tmp_path / "data"), "checkpoint_dir": str(tmp_path / "saved"), "seed": 2020, **QUIET}
    # every model with its defaults, but V's learning rate: its default (3e-5) suits real text, where a faster V
    # memorises the training items' co-likes (docs/models.md); planted pairs are all V can learn from
    faster_v = {"FBSM": {"learning_rate": 0.003}}
    recall = {
        name: run(name, "planted", config_dict={**common, **faster_v.get(name, {})})["test_result"]["recall@10"]
        for name in ("FBSM", "UFSM", "CoSim")
    }
    assert recall["FBSM"] >= 2 * recall["CoSim"], recall
    assert recall["FBSM"] >= 2 * recall["UFSM"], recall
    assert recall["FBSM"] > 0.2, recall


def test_same_seed_same_numbers_and_checkpoints_reload(tiny):
    config = {**tiny, "epochs": 3, "rank": 2}
    first, second = run("FBSM", "tiny", config_dict=config), run("FBSM", "tiny", config_dict=config)
    assert first["test_result"] == second["test_result"]
    assert first["saved_model_file"] != second["saved_model_file"]
    assert first["best_valid_result"] == second["best_valid_result"]
    checkpoint = load_checkpoint(first["saved_model_file"])
    assert set(checkpoint["state_dict"]) == {"D", "V"}  # features are rebuilt from data, not pickled
    config_obj, model, (_, _, test_data) = prepare("FBSM", "tiny", config_dict=config)
    trainer = get_trainer(config_obj["MODEL_TYPE"], "FBSM")(config_obj, model)
    reloaded = trainer.evaluate(test_data, load_best_model=True, model_file=first["saved_model_file"])
    assert reloaded == first["test_result"]
    torch.testing.assert_close(model.V, checkpoint["state_dict"]["V"])


def test_alignment_to_a_warm_model_is_the_kl_of_the_dense_similarities(tiny):
    """align_weight > 0: the loss adds KL(softmax(cos(e_i, e_j) / τ) || softmax(f_i^T (D + V V^T) f_j / τ)) over
    the batch's distinct positive items (j != i), computed here by brute force from dense matrices; the
    warm tables and the checkpoint hold nothing of validation/test items, and scoring is unchanged."""
    config = {
        **tiny,
        "rank": 3,
        "align_weight": 0.5,
        "align_temperature": 0.2,
        "warm_epochs": 2,
        "warm_embedding_size": 4,
    }
    model, (train_data, _, test_data) = build("FBSM", config)
    with torch.no_grad():
        model.D.uniform_(0.5, 1.5)
        model.V.normal_(0, 0.3)
    items = torch.tensor([1, 2, 3, 5, 8, 8, 13])
    distinct = torch.unique(items)
    F = model.F.dense_rows(distinct).double()
    D, V = model.D.detach().double(), model.V.detach().double()
    student = F @ (torch.diag(D) + V @ V.T) @ F.T
    warm = torch.nn.functional.normalize(model.warm_items.double()[distinct], dim=1)
    teacher = warm @ warm.T
    expected = 0.0
    for a in range(len(distinct)):
        others = [b for b in range(len(distinct)) if b != a]
        p = torch.softmax(teacher[a, others] / 0.2, 0)
        log_q = torch.log_softmax(student[a, others] / 0.2, 0)
        expected += float((p * (p.log() - log_q)).sum())
    expected /= len(distinct)
    assert float(model.alignment_loss(items)) == pytest.approx(expected, rel=1e-4)
    # the warm model was trained on training likes only: rows of validation/test items are zero
    cold = torch.as_tensor(test_data._dataset.split_items)
    assert float(model.warm_items[cold].abs().sum()) == 0.0
    assert set(model.state_dict()) == {"D", "V"}
    result = run("FBSM", "tiny", config_dict={**config, "epochs": 2})
    assert set(load_checkpoint(result["saved_model_file"])["state_dict"]) == {"D", "V"}


def test_untrained_ufsm_with_one_function_is_exactly_its_fixed_similarity(tiny):
    """W = 1, M = 1 and no noise for l = 1: the untrained model, kept when no epoch beats it, is the fixed
    similarity of its features: ItemKNNCBF's default on the default features, CoSim on L2-normalised tf-idf."""
    ufsm, (_, _, test_data) = build("UFSM", tiny)
    knn, _ = build("ItemKNNCBF", tiny)
    ufsm_tfidf, _ = build("UFSM", {**tiny, "feature_weighting": "tfidf", "feature_shrink": 0})
    cosim, _ = build("CoSim", tiny)
    users = Interaction({"user_id": torch.arange(1, ufsm.n_users)})
    candidates = torch.as_tensor(test_data._dataset.split_items)
    with torch.no_grad():
        torch.testing.assert_close(ufsm.score_candidates(users, candidates), knn.score_candidates(users, candidates))
        torch.testing.assert_close(
            ufsm_tfidf.score_candidates(users, candidates), cosim.score_candidates(users, candidates)
        )


def candidate_reference(model, F, likes, users, candidates):
    """Scores of ``users`` over ``candidates`` from the dense formula, estimation constraint included."""
    items = F[candidates.numpy()]
    rows = []
    for u in users.tolist():
        W = dense_similarity(model, u)
        own = np.einsum("ij,jk,ik->i", items, W, items)
        rows.append((likes[u] @ F) @ W @ items.T - likes[u][candidates.numpy()] * own)
    return np.array(rows)


@pytest.mark.parametrize("name", ["FBSM", "UFSM", "CoSim"])
def test_candidate_scores_in_blocks_of_users_equal_the_dense_formula(tiny, monkeypatch, name):
    """Evaluation's and serving's scores, users in blocks of two (``score_feature_rows``), candidates out of order,
    per-user weights for UFSM."""
    model, _ = build(name, {**tiny, "rank": 3, "n_functions": 2})
    F, likes = randomise_features(model, seed=5)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter))
    monkeypatch.setattr(base, "SCORE_BLOCK_CELLS", 2 * F.shape[0])
    users, candidates = torch.arange(1, likes.shape[0]), torch.arange(F.shape[0] - 1, 0, -1)
    with torch.no_grad():
        scores = model.score_candidates(Interaction({"user_id": users}), candidates)
        unconstrained = model.score_feature_rows(users, model.F.rows_matrix(candidates))
    assert len(users) > 4, "several blocks"
    expected = candidate_reference(model, F, likes, users, candidates)
    np.testing.assert_allclose(scores.numpy(), expected, rtol=1e-9, atol=1e-9)
    liked = likes[users.numpy()][:, candidates.numpy()]
    own = np.array(
        [
            np.einsum("ij,jk,ik->i", F[candidates.numpy()], dense_similarity(model, u), F[candidates.numpy()])
            for u in users.tolist()
        ]
    )
    np.testing.assert_allclose(unconstrained.numpy(), expected + liked * own, rtol=1e-9, atol=1e-9)
    assert model.score_feature_rows(users[:0], model.F.rows_matrix(candidates)).shape == (0, len(candidates))
