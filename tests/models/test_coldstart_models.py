"""DropoutNet, Heater and ALDI: cold items scored from features alone, no leak of validation/test items
(warm backbone included), and learning on generated data."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from synthetic import planted_interactions, write_atomic

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.kernels.sparse import TorchCsr
from recbole_fbsm.models.warm_backbone import warm_embeddings
from recbole_fbsm.quick_start import prepare, run
from recbole_fbsm.storage.safe_files import load_checkpoint
from recbole_fbsm.training.trainer import get_trainer

MODELS = ("DropoutNet", "Heater", "ALDI")
QUIET = {"state": "ERROR", "show_progress": False, "torch_threads": 1}
# small and quick: a short warm backbone and small towers (the property files hold the papers' sizes)
SMALL = {
    "warm_embedding_size": 16,
    "warm_epochs": 100,
    "hidden_sizes": [32, 16],
    "hidden_size": 32,
    "n_experts": 3,
    "train_batch_size": 256,
}


def topics_dataset(folder, name, extra_test_likes=0, seed=0):
    """Users of 4 topics like items of their topic (topic word + two noise words); the last ``extra_test_likes``
    rows add likes to items that the item split puts in validation/test, for existing users and items only
    (so ids and the split stay the same)."""
    rng = np.random.default_rng(seed)
    items = [f"i{k}" for k in range(80)]
    topic = {item: k % 4 for k, item in enumerate(items)}
    words = {item: [f"t{topic[item]}"] + [f"n{w}" for w in rng.choice(30, 2, replace=False)] for item in items}
    rows = sorted(
        {
            (f"u{u}", item)
            for u in range(40)
            for item in rng.choice([i for i in items if topic[i] == u % 4], 8, replace=False)
        }
    )
    liked = {item for _, item in rows}
    rows += [("filler", item) for item in items if item not in liked]
    if extra_test_likes:
        from recbole_fbsm.data.dataset import item_split

        split = dict(zip(items, item_split(items, (0.6, 0.2, 0.2), 2020)))
        held_out = [i for i in items if split[i] > 0]
        present = set(rows)
        extra = [(f"u{u}", i) for u in range(40) for i in held_out if (f"u{u}", i) not in present]
        rows += [extra[k] for k in rng.choice(len(extra), extra_test_likes, replace=False)]
    write_atomic(folder, name, rows, words)


@pytest.fixture
def topics(tmp_path):
    topics_dataset(tmp_path / "data", "topics")
    return {
        "data_path": str(tmp_path / "data"),
        "checkpoint_dir": str(tmp_path / "saved"),
        "seed": 2020,
        **QUIET,
        **SMALL,
    }


@pytest.mark.parametrize("name", MODELS)
def test_a_cold_item_is_scored_from_its_features_only(topics, name):
    config, model, (train_data, _, test_data) = prepare(name, "topics", config_dict={**topics, "learning_rate": 0.01})
    trainer = get_trainer(config["MODEL_TYPE"], name)(config, model)
    for epoch in range(3):  # trained scores, far from the untrained towers' near-zero outputs
        trainer._train_epoch(train_data, epoch)
    model.eval()
    dataset = test_data._dataset
    candidates = torch.as_tensor(dataset.split_items, dtype=torch.long)
    users = torch.arange(1, dataset.user_num)
    from recbole.data.interaction import Interaction

    scores = model.score_candidates(Interaction({model.USER_ID: users}), candidates)
    # the same scores from the feature rows alone, without the items' ids
    rows = model.F.rows_matrix(candidates)
    tolerance = {"rtol": 1e-5, "atol": 1e-5 * float(scores.abs().max())}
    torch.testing.assert_close(model.score_feature_rows(users, rows), scores, **tolerance)
    # two cold items with swapped feature rows swap their scores: the id plays no part
    a, b = 0, 1
    assert not torch.equal(scores[:, a], scores[:, b])
    swapped = model.score_feature_rows(users, model.F.rows_matrix(candidates[[b, a]]))
    torch.testing.assert_close(swapped, scores[:, [a, b]].flip(1), **tolerance)
    # changing a cold item's features changes its scores
    F = sp.csr_matrix((model.F.values.numpy(), model.F.indices.numpy(), model.F.indptr.numpy()), shape=model.F.shape)
    row = F[int(candidates[a])].toarray()
    row[0, np.argmin(row[0])] = 1.0  # one more feature
    changed = model.score_feature_rows(users, TorchCsr(sp.csr_matrix(row)).to_torch_sparse())
    assert not torch.allclose(changed[:, 0], scores[:, a], rtol=1e-3, atol=0)


@pytest.mark.parametrize("name", MODELS)
def test_validation_and_test_likes_never_reach_training(tmp_path, name):
    """Two datasets that differ only in likes of validation/test items give identical warm embeddings and
    identical models after an epoch of training; the warm rows of non-training items are zero."""
    states, sizes = [], []
    for variant, extra in (("same_a", 0), ("same_b", 60)):
        topics_dataset(tmp_path / "data", variant, extra_test_likes=extra)
        settings = {
            "data_path": str(tmp_path / "data"),
            "checkpoint_dir": str(tmp_path / "saved"),
            "seed": 2020,
            **QUIET,
            **SMALL,
            "epochs": 1,
        }
        config, model, (train_data, valid_data, test_data) = prepare(name, variant, config_dict=settings)
        trainer = get_trainer(config["MODEL_TYPE"], name)(config, model)
        trainer._train_epoch(train_data, 0)
        assert bool(model.warm_item_embedding[~model.training_item_mask].eq(0).all())
        assert bool(model.warm_item_embedding[model.training_item_mask][1:].ne(0).any())
        states.append({k: v.clone() for k, v in model.state_dict().items()})
        sizes.append(
            (
                len(train_data._dataset.inter_feat),
                len(valid_data._dataset.inter_feat) + len(test_data._dataset.inter_feat),
            )
        )
    assert sizes[0][0] == sizes[1][0] and sizes[1][1] == sizes[0][1] + 60, sizes
    first, second = states
    assert first.keys() == second.keys()
    for key in first:
        torch.testing.assert_close(first[key], second[key], msg=key)


@pytest.mark.parametrize("name", MODELS)
def test_learns_planted_data_well_above_random(tmp_path, name):
    """The planted data (FBSM's test): students' validation/test likes share no feature with their training
    likes, but teachers of their type like both kinds in training, so the warm backbone links them. Mean of two
    training seeds: on data this small one start can be poor (Heater: 0.36 at seed 2020, 0.59-0.74 at 2021-2023)."""
    planted_interactions(tmp_path / "data", "planted", split_seed=2020)
    common = {
        "data_path": str(tmp_path / "data"),
        "checkpoint_dir": str(tmp_path / "saved"),
        "epochs": 30,
        "stopping_step": 30,
        **QUIET,
        **SMALL,
        "learning_rate": 0.01,
    }
    recall = {
        m: sum(run(m, "planted", config_dict={**common, "seed": s})["test_result"]["recall@10"] for s in (2020, 2021))
        / 2
        for m in (name, "Random")
    }
    assert recall[name] >= 2 * recall["Random"], recall  # Random: about 0.17 here (few candidates)


def test_warm_checkpoint_of_the_same_split_is_used_and_another_split_refused(topics):
    bpr = run("BPR", "topics", config_dict={**topics, "epochs": 3, "embedding_size": 8})["saved_model_file"]
    config, model, _ = prepare("ALDI", "topics", config_dict={**topics, "epochs": 1, "warm_checkpoint": bpr})
    saved = load_checkpoint(bpr)["state_dict"]["item_embedding.weight"]
    mask = model.training_item_mask
    torch.testing.assert_close(model.warm_item_embedding[mask], saved[mask])
    assert bool(model.warm_item_embedding[~mask].eq(0).all())  # never a validation/test item's row
    with pytest.raises(ColdStartError, match="warm_checkpoint"):
        prepare("ALDI", "topics", config_dict={**topics, "seed": 7, "epochs": 1, "warm_checkpoint": bpr})


def test_warm_embeddings_are_reproducible_and_zero_outside_training(topics):
    config, model, (train_data, _, _) = prepare("DropoutNet", "topics", config_dict={**topics, "epochs": 1})
    users, items = warm_embeddings(config, train_data._dataset)
    torch.testing.assert_close(items, model.warm_item_embedding)
    torch.testing.assert_close(users, model.warm_user_embedding)
    assert bool(items[~model.training_item_mask].eq(0).all())


@pytest.mark.parametrize("name", MODELS)
def test_serving_new_items_from_a_checkpoint(topics, tmp_path, name):
    from helpers import score_new_items, write_items_as_new

    from recbole_fbsm.serve.loading import load_model
    from recbole_fbsm.serve.new_items import read_new_items
    from recbole_fbsm.serve.recommend import recommend

    result = run(name, "topics", config_dict={**topics, "epochs": 5, "learning_rate": 0.01})
    served = load_model(result["artifact_file"])  # the artifact: no dataset read, no backbone retrained
    dataset = served.dataset
    tokens = served.item_tokens(served.split_items("test")[:5])
    path = tmp_path / "new.item"
    write_items_as_new(tmp_path / "data" / "topics" / "topics.item", path, tokens)
    new_items = read_new_items(served, path)
    users = torch.arange(1, dataset.user_num)
    from recbole.data.interaction import Interaction

    originals = served.item_ids([token[len("new_") :] for token in new_items.tokens])  # the file's order
    expected = served.model.score_candidates(Interaction({served.model.USER_ID: users}), originals)
    scale = float(expected.abs().max())
    torch.testing.assert_close(score_new_items(served, new_items, users), expected, rtol=1e-4, atol=1e-4 * scale)
    exported = load_model(result["saved_model_file"])  # the checkpoint, exported through the dataset: the same model
    torch.testing.assert_close(
        score_new_items(exported, read_new_items(exported, path), users), expected, rtol=1e-4, atol=1e-4 * scale
    )
    lists = recommend(served, new_items, top=3)
    assert len(lists.for_items) == 5 * 3


HYBRID = {"cold_start_scenario": "hybrid", "topk": [10], "valid_metric": "recall@10"}


@pytest.mark.parametrize("name", MODELS)
def test_hybrid_scenario_scores_warm_items_by_the_warm_tower_and_cold_items_by_content(topics, name):
    """The papers' hybrid evaluation: a warm candidate through the warm input (ALDI: the teacher's own score),
    a cold one from its features alone; a cold item's warm row is zero and, set anyway, changes nothing."""
    from recbole.data.interaction import Interaction

    config, model, (train_data, _, test_data) = prepare(
        name, "topics", config_dict={**topics, **HYBRID, "learning_rate": 0.01}
    )
    trainer = get_trainer(config["MODEL_TYPE"], name)(config, model)
    for epoch in range(3):
        trainer._train_epoch(train_data, epoch)
    dataset = test_data._dataset
    candidates = torch.as_tensor(dataset.split_items, dtype=torch.long)
    warm = torch.as_tensor(np.isin(dataset.split_items, dataset.warm_items))
    assert 0 < int((~warm).sum()) < len(warm)
    assert torch.equal(torch.nonzero(model.training_item_mask).squeeze(1), torch.as_tensor(dataset.warm_items))
    assert bool(model.warm_item_embedding[candidates[~warm]].eq(0).all())  # no leak: nothing learned for cold items
    users = Interaction({model.USER_ID: torch.arange(1, dataset.user_num)})

    def scores():
        model.eval()  # drops the cached candidate vectors
        with torch.no_grad():
            return model.score_candidates(users, candidates)

    before = scores()
    content = model.score_feature_rows(users[model.USER_ID], model.F.rows_matrix(candidates))
    tolerance = {"rtol": 1e-5, "atol": 1e-5 * float(before.abs().max())}
    torch.testing.assert_close(before[:, ~warm], content[:, ~warm], **tolerance)
    assert not torch.allclose(before[:, warm], content[:, warm], rtol=1e-3, atol=0)  # not the content tower
    if name == "ALDI":
        teacher = model.warm_user_embedding[users[model.USER_ID]] @ model.warm_item_embedding[candidates[warm]].T
        torch.testing.assert_close(before[:, warm], teacher)
        pairs = Interaction({model.USER_ID: users[model.USER_ID][:5], model.ITEM_ID: candidates[:5]})
        torch.testing.assert_close(model.predict(pairs), before[torch.arange(5), torch.arange(5)])
    # the warm input moves a warm item's scores only; a cold item's row, even set, is never read
    table = model.item_preference_table()
    first_warm, first_cold = (int(torch.nonzero(mask)[0]) for mask in (warm, ~warm))
    table[candidates[first_warm]] += 1.0
    table[candidates[first_cold]] = table[candidates[first_warm]]
    after = scores()
    assert not torch.allclose(after[:, first_warm], before[:, first_warm], rtol=1e-3, atol=0)
    others = torch.ones(len(candidates), dtype=torch.bool)
    others[first_warm] = False
    torch.testing.assert_close(after[:, others], before[:, others])


@pytest.mark.parametrize("name", MODELS)
def test_a_short_hybrid_run_on_ml_100k_reports_the_three_groups(tmp_path, name):
    small = {**SMALL, "warm_epochs": 5, "train_batch_size": 2048}
    result = run(
        name, "ml-100k", config_dict={**QUIET, **small, **HYBRID, "checkpoint_dir": str(tmp_path), "epochs": 1}
    )
    for key in ("test_result", "test_result_cold", "test_result_warm"):
        assert 0 < result[key]["recall@10"] <= 1, (key, result[key])
