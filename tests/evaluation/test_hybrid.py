"""The hybrid scenario: cold and warm items in one ranking, with all / cold / warm metrics."""

from collections import Counter

import numpy as np
import pytest
import torch
from helpers import dataset_config, tokens_of, write_dataset

from recbole_fbsm.config.cold_start_config import ColdStartConfig
from recbole_fbsm.data import create_dataset
from recbole_fbsm.data.dataset import per_user_split
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.evaluation.collector import tie_keys
from recbole_fbsm.quick_start import prepare, run
from recbole_fbsm.training.trainer import get_trainer, lowest_for_cold

pytestmark = pytest.mark.usefixtures("workdir")

HYBRID = {"cold_start_scenario": "hybrid", "metrics": ["Recall", "NDCG"], "topk": [5], "valid_metric": "recall@5"}


@pytest.fixture
def data(tmp_path):
    return write_dataset(tmp_path, "hyb", n_users=50, n_items=80, likes_per_user=(4, 14))


def build(data, model="BPR", **overrides):
    config = ColdStartConfig(
        model=model, dataset=data.name, config_dict=dataset_config(data, **{**HYBRID, **overrides})
    )
    return create_dataset(config).build()


def pairs(part, feat=None):
    feat = part.inter_feat if feat is None else feat
    return list(
        zip(
            tokens_of(part, part.uid_field, feat[part.uid_field].numpy()),
            tokens_of(part, part.iid_field, feat[part.iid_field].numpy()),
        )
    )


def test_the_split_holds_cold_items_out_of_training_and_warm_test_likes_unseen(data):
    train, valid, test = build(data)
    cold_valid, cold_test = set(valid.cold_items.tolist()), set(test.cold_items.tolist())
    warm = set(train.warm_items.tolist())
    assert cold_valid and cold_test and not (cold_valid & cold_test) and not ((cold_valid | cold_test) & warm)
    assert len(train.cold_items) == 0
    # cold items: none of their interactions in training, none in the training negative pool
    assert not (set(train.inter_feat[train.iid_field].numpy().tolist()) & (cold_valid | cold_test))
    assert set(train.split_items.tolist()) == warm
    if train.dislike_feat is not None:
        assert not (set(train.dislike_feat[train.iid_field].numpy().tolist()) & (cold_valid | cold_test))
    # each split's candidates: every warm item and its own cold items; its cold likes are its own
    assert set(valid.split_items.tolist()) == warm | cold_valid and set(test.split_items.tolist()) == warm | cold_test
    assert not (set(valid.inter_feat[valid.iid_field].numpy().tolist()) & cold_test)
    assert not (set(test.inter_feat[test.iid_field].numpy().tolist()) & cold_valid)
    # a warm like is in one split only: no warm test (or valid) like was seen in training
    train_pairs = set(pairs(train))
    assert not (set(pairs(test)) & train_pairs) and not (set(pairs(valid)) & train_pairs)
    assert not (set(pairs(test)) & set(pairs(valid)))
    # every like of the files is kept, once; about 20% of the interacted items are cold
    kept = pairs(train) + pairs(valid) + pairs(test)
    assert Counter(kept) == Counter(data.likes())
    assert abs(len(cold_valid | cold_test) - 0.2 * len(data.interacted_items)) <= 1


def test_per_user_split_has_recboles_sizes():
    from recbole.data.dataset import Dataset

    users = np.repeat(np.arange(12), np.arange(1, 13))
    split = per_user_split(users, [0.8, 0.1, 0.1], 7)
    for user in range(12):
        counts = np.bincount(split[users == user], minlength=3)
        expected = np.diff([0] + Dataset._calcu_split_ids(None, user + 1, [0.8, 0.1, 0.1]) + [user + 1])
        assert counts.tolist() == expected.tolist(), user


def test_the_split_does_not_depend_on_the_files_row_order(tmp_path):
    first = write_dataset(tmp_path / "a", "hyb", n_users=30, n_items=50)
    second = write_dataset(tmp_path / "b", "hyb", n_users=30, n_items=50, rows_order_seed=3)
    assert [sorted(pairs(part)) for part in build(first)] == [sorted(pairs(part)) for part in build(second)]


def test_lowest_for_cold_gives_cold_columns_the_rows_lowest_warm_score():
    scores = torch.tensor([[3.0, 1.0, 5.0, 2.0], [0.5, -np.inf, 4.0, 9.0]])
    cold = torch.tensor([False, True, False, True])
    result = lowest_for_cold(scores, cold)
    assert result.tolist() == [[3.0, 3.0, 5.0, 3.0], [0.5, 0.5, 4.0, 0.5]]


def brute_force(model, loader, k, seed, known_parts):
    """Recall@k and NDCG@k for the all / cold / warm groups, one user at a time, from the model's full scores:
    candidates = the split's items minus the user's history; ties ordered by the tie keys."""
    dataset = loader._dataset
    cold = set(dataset.cold_items.tolist())
    candidates = np.asarray(dataset.split_items)
    users = loader.uid_list.numpy()
    positives = {u: set() for u in users}
    for u, i in zip(dataset.inter_feat[dataset.uid_field].numpy(), dataset.inter_feat[dataset.iid_field].numpy()):
        positives[u].add(int(i))
    known = {u: set() for u in users}  # training likes; at test also the validation likes (RecBole's RS masks)
    for part in known_parts:
        for u, i in zip(part.inter_feat[part.uid_field].numpy(), part.inter_feat[part.iid_field].numpy()):
            if u in known:
                known[u].add(int(i))
    warm_only = getattr(model, "warm_only", False)
    sums = {group: [0.0, 0.0, 0] for group in ("all", "cold", "warm")}
    with torch.no_grad():
        for u in users:
            interaction = {model.USER_ID: torch.tensor([u])}
            row = model.full_sort_predict(interaction).view(-1).double().numpy()
            scores = row[candidates].copy()
            if warm_only:
                is_cold = np.array([c in cold for c in candidates])
                scores[is_cold] = scores[~is_cold].min()
            for group in ("all", "cold", "warm"):
                keep = [
                    j
                    for j, c in enumerate(candidates)
                    if c not in known[u] and (group == "all" or (c in cold) == (group == "cold"))
                ]
                items = candidates[keep]
                relevant = positives[u] & set(items.tolist())
                if not relevant:
                    continue
                ties = tie_keys(seed, torch.tensor(int(u)), torch.as_tensor(items)).numpy()
                order = np.lexsort((-ties, -scores[keep]))[:k]
                hits = np.array([items[j] in relevant for j in order], dtype=float)
                ideal = sum(1 / np.log2(r + 2) for r in range(min(len(relevant), k)))
                sums[group][0] += hits.sum() / len(relevant)
                sums[group][1] += (hits / np.log2(np.arange(len(hits)) + 2)).sum() / ideal
                sums[group][2] += 1
    return {group: (r / n, g / n) for group, (r, g, n) in sums.items()}


@pytest.mark.parametrize("model_name", ["CoSim", "BPR", "EASE", "ItemKNN"])
def test_group_metrics_equal_a_brute_force_computation(data, quiet, model_name):
    config, model, (train, valid, test) = prepare(
        model_name, data.name, config_dict=dataset_config(data, quiet, metric_decimal_place=12, **HYBRID)
    )
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    # RecBole's general models (EASE and ItemKNN are typed TRADITIONAL): a cold item gets the lowest warm score
    model.warm_only = model_name != "CoSim"
    for loader in (valid, test):
        result = trainer.evaluate(loader, load_best_model=False)
        earlier = [train._dataset] + ([valid._dataset] if loader is test else [])
        expected = brute_force(model, loader, 5, config["seed"], earlier)
        got = {"all": result, **trainer.group_results}
        for group, (recall, ndcg) in expected.items():
            assert got[group]["recall@5"] == pytest.approx(recall, abs=1e-9), (group, loader._dataset.phase)
            assert got[group]["ndcg@5"] == pytest.approx(ndcg, abs=1e-9), (group, loader._dataset.phase)


def test_group_metrics_do_not_depend_on_the_evaluation_batch_size(data, quiet):
    results = []
    for batch in (83, 1 << 22):
        config, model, (_, valid, test) = prepare(
            "CoSim", data.name, config_dict=dataset_config(data, quiet, eval_batch_size=batch, **HYBRID)
        )
        trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
        results.append(
            [(trainer.evaluate(loader, load_best_model=False), dict(trainer.group_results)) for loader in (valid, test)]
        )
        assert valid.step < 5 if batch == 83 else True
    assert results[0] == results[1]


def test_run_returns_and_records_the_three_groups_and_validates_on_the_chosen_group(data, quiet):
    import json

    result = run(
        "CoSim", data.name, config_dict=dataset_config(data, quiet, **{**HYBRID, "hybrid_valid_group": "cold"})
    )
    for key in ("test_result_cold", "test_result_warm", "valid_result_cold", "valid_result_warm"):
        assert set(result[key]) == {"recall@5", "ndcg@5"}, key
    assert result["best_valid_score"] == pytest.approx(result["valid_result_cold"]["recall@5"])
    record = json.loads(open(result["result_file"]).read())
    assert record["test_result_cold"] == result["test_result_cold"]
    assert record["test_result"] == result["test_result"]


def test_identity_features_are_refused_in_the_item_scenario(data, quiet):
    with pytest.raises(ColdStartError, match="identity_features: True needs cold_start_scenario: hybrid"):
        ColdStartConfig(
            model="FBSM", dataset=data.name, config_dict=dataset_config(data, quiet, identity_features=True)
        )


def test_the_hybrid_scenario_needs_the_item_grouping(data, quiet):
    with pytest.raises(ColdStartError, match="cold_start_scenario: hybrid splits items itself"):
        ColdStartConfig(
            model="BPR",
            dataset=data.name,
            config_dict=dataset_config(
                data,
                quiet,
                cold_start_scenario="hybrid",
                eval_args={"group_by": "user", "split": {"RS": [0.8, 0.1, 0.1]}},
            ),
        )


@pytest.mark.parametrize("model_name", ["BPR", "FBSM"])
def test_no_cold_item_is_a_training_negative(data, quiet, model_name):
    config, model, (train, valid, test) = prepare(
        model_name, data.name, config_dict=dataset_config(data, quiet, **HYBRID)
    )
    cold = set(valid._dataset.cold_items.tolist()) | set(test._dataset.cold_items.tolist())
    negatives, positives = [], []
    for _ in range(3):
        for batch in train:
            negatives += batch[config["NEG_PREFIX"] + config["ITEM_ID_FIELD"]].reshape(-1).tolist()
            positives += batch[config["ITEM_ID_FIELD"]].tolist()
    assert len(set(negatives)) > 20 and not (set(negatives) & cold) and not (set(positives) & cold)


class _Fixed:
    """A stand-in model with fixed (users x items) scores."""

    def __init__(self, scores):
        self.scores = torch.as_tensor(scores, dtype=torch.float64)

    def score_candidates(self, interaction, candidates):
        return self.scores[:, candidates]


def test_the_blend_standardises_each_model_per_user_and_leaves_cold_items_neutral_for_the_warm_model():
    from types import SimpleNamespace

    from recbole_fbsm.models.hybrid_blend import HybridBlend, standardised

    warm = [[1.0, 2.0, 3.0, 100.0, -100.0], [0.0, 0.0, 6.0, 5.0, 5.0]]
    content = [[5.0, 1.0, 0.0, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0, 5.0]]
    is_warm = torch.tensor([True, True, True, False, False])
    blend = SimpleNamespace(warm_model=_Fixed(warm), content_model=_Fixed(content), is_warm=is_warm, weight=0.3)
    candidates = torch.arange(5)
    scores = HybridBlend.candidate_scorer(blend, candidates)(None)
    z_warm = torch.cat([standardised(torch.tensor(warm)[:, :3].double()), torch.zeros(2, 2, dtype=torch.float64)], 1)
    expected = 0.3 * z_warm + 0.7 * standardised(torch.tensor(content, dtype=torch.float64))
    assert torch.allclose(scores, expected)
    row = torch.tensor([1.0, 2.0, 3.0])
    assert torch.allclose(standardised(row[None])[0], (row - row.mean()) / row.std(unbiased=False))
    # the warm model's huge scores for cold items 3 and 4 change nothing: z = 0 there
    assert torch.allclose(scores[0, 3:], 0.7 * standardised(torch.tensor(content, dtype=torch.float64))[0, 3:])


def test_the_blend_weight_is_chosen_on_validation_only(data, quiet, monkeypatch):
    from recbole_fbsm.training.trainer import ColdStartTrainerMixin

    seen = []
    original = ColdStartTrainerMixin.evaluate

    def recording(self, eval_data, *args, **kwargs):
        result = original(self, eval_data, *args, **kwargs)
        weight = getattr(self.model, "weight", None)
        if weight is not None:
            seen.append((eval_data._dataset.phase, weight, result["recall@5"]))
        return result

    monkeypatch.setattr(ColdStartTrainerMixin, "evaluate", recording)
    result = run(
        "HybridBlend",
        data.name,
        config_dict=dataset_config(data, quiet, warm_model="BPR", content_model="CoSim", **HYBRID),
    )
    valid = [(w, score) for phase, w, score in seen if phase == "valid"]
    tests = [w for phase, w, _ in seen if phase == "test"]
    assert len(valid) == 11 and tests == [result["blend_weight"]]  # the test split is evaluated once, afterwards
    best = max(score for _, score in valid)
    assert result["blend_weight"] == next(w for w, score in valid if score == best)
    assert result["best_valid_score"] == best and result["record"]["model"] == "HybridBlend"
    assert set(result["test_result_cold"]) == {"recall@5", "ndcg@5"}


def test_identity_features_go_to_items_with_training_likes_only_and_dropout_hides_them(data, quiet):
    config, model, (train, valid, test) = prepare(
        "FBSM",
        data.name,
        config_dict=dataset_config(
            data, quiet, identity_features=True, identity_weight=0.5, identity_dropout=1.0, **HYBRID
        ),
    )
    features = train._dataset.model_inputs.features
    liked = set(train._dataset.inter_feat[train._dataset.iid_field].numpy().tolist())
    assert set(features.identity_items.tolist()) == liked and model.n_identity == len(liked)
    names = features.names[-model.n_identity :]
    assert names == [f"identity:{t}" for t in tokens_of(train._dataset, "item_id", features.identity_items)]
    matrix = features.matrix.tocsc()[:, -model.n_identity :].tocsr()
    cold = np.concatenate([valid._dataset.cold_items, test._dataset.cold_items])
    assert matrix[cold].nnz == 0, "a cold item never has an identity"
    assert (matrix[features.identity_items].toarray() == 0.5 * np.eye(len(liked))).all()
    # identity_dropout 1: in training every identity is hidden; the model's F is restored afterwards
    batch = next(iter(train))
    full = model.F.values.clone()
    model.train()
    loss = model.calculate_loss(batch)
    assert torch.equal(model.F.values, full)
    model.F.values = full.index_put((model.identity_entries,), torch.zeros(len(model.identity_entries)))
    model.identity_dropout = 0.0
    assert torch.allclose(loss, model.calculate_loss(batch))


def test_the_softmax_loss_equals_its_definition_over_the_full_scores(data, quiet):
    config, model, (train, valid, test) = prepare(
        "FBSM",
        data.name,
        config_dict=dataset_config(
            data,
            quiet,
            identity_features=True,
            identity_dropout=0.0,
            softmax_temperature=0.2,
            init_std=0.3,
            reg_V=0.0,
            reg_D=0.0,
            **HYBRID,
        ),
    )
    batch = next(iter(train))
    model.train()
    loss = model.calculate_loss(batch)
    users, items = batch["user_id"], batch["item_id"]
    training_items = torch.as_tensor(train._dataset.split_items)
    with torch.no_grad():
        scores = model.full_sort_predict({model.USER_ID: users}).view(len(users), -1)[:, training_items]
        likes = torch.as_tensor(np.diff(train._dataset.model_inputs.likes.indptr))[users].double()
        log_p = torch.log_softmax(scores.double() * likes.pow(-1)[:, None] / 0.2, dim=1)
        column = torch.searchsorted(training_items, items)
        expected = -log_p[torch.arange(len(users)), column].mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    loss.backward()
    assert model.V.grad.abs().sum() > 0 and model.D.grad.abs().sum() > 0


def test_the_artifact_records_the_scenario_and_the_identity_vocabulary(data, quiet):
    from recbole_fbsm.serve.loading import load_model

    result = run("FBSM", data.name, config_dict=dataset_config(data, quiet, identity_features=True, **HYBRID))
    served = load_model(result["artifact_file"])
    assert served.config["cold_start_scenario"] == "hybrid" and served.config["identity_features"] is True
    names = served.features.names
    identity = [name for name in names if name.startswith("identity:")]
    assert served.model.n_identity == len(identity) > 0 and names[-len(identity) :] == identity
    # an item weighted from its text (a new item) gets no identity
    counts = np.zeros((1, len(served.features.column_weights)))
    counts[0, :3] = 1
    assert served.features.transform(counts)[:, -len(identity) :].nnz == 0
