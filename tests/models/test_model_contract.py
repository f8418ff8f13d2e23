"""The contract every registered plugin model keeps (in the spirit of implicit's RecommenderBaseTestMixin).

The models come from the registry (``config.registry.PLUGIN_MODELS``), so a new model is tested as soon as
it is registered: on tiny generated data it trains one epoch (or declares that it has nothing to train),
scores every item with finite values of the right shape, ``predict`` agrees with ``full_sort_predict``, a
validation/test item never scores through its own like, a seeded run repeats exactly, and the methods of
RecBole's interface that the plugin writes document their tensors (``Args:``/``Returns:``, as RecBole's
``bpr.py`` and ``fism.py`` do).
"""

import numpy as np
import pytest
import torch
from recbole.data.interaction import Interaction
from synthetic import write_atomic

import recbole_fbsm.models
from recbole_fbsm.config.registry import PLUGIN_MODELS, get_model
from recbole_fbsm.models.contract import has_nothing_to_train
from recbole_fbsm.models.hybrid_blend import HybridBlend
from recbole_fbsm.quick_start import prepare
from recbole_fbsm.training.trainer import get_trainer

MODELS = sorted(PLUGIN_MODELS)
# small and quick: a short warm backbone, small towers and ranks (the property files hold the papers' sizes)
SETTINGS = {
    "state": "ERROR",
    "show_progress": False,
    "use_gpu": False,
    "torch_threads": 1,
    "seed": 2020,
    "epochs": 1,
    "warm_embedding_size": 8,
    "warm_epochs": 2,
    "hidden_sizes": [16, 8],
    "hidden_size": 16,
    "n_experts": 2,
    "rank": 8,
    "train_batch_size": 128,
    "eval_batch_size": 4096,
}
# what a model needs of the data, not a list of models: HybridBlend blends warm and cold items
SCENARIO = {"HybridBlend": {"cold_start_scenario": "hybrid"}}
CONTRACT_METHODS = ("calculate_loss", "predict", "full_sort_predict")


def topics_rows(seed=0):
    """40 users of 4 topics, each liking 8 of the 60 items of its topic (topic word + two noise words)."""
    rng = np.random.default_rng(seed)
    items = [f"i{k:02d}" for k in range(60)]
    words = {item: [f"t{k % 4}"] + [f"n{w}" for w in rng.choice(20, 2, replace=False)] for k, item in enumerate(items)}
    rows = sorted(
        {(f"u{u:02d}", items[k]) for u in range(40) for k in rng.choice(np.arange(u % 4, 60, 4), 8, replace=False)}
    )
    liked = {item for _, item in rows}
    return rows + [("filler", item) for item in items if item not in liked], words


def build(name, data_path, folder):
    """(model after one training epoch, the training dataset), as ``quick_start`` prepares them; a HybridBlend
    is built, as ``quick_start.run_blend`` builds it, from its two models."""
    config_dict = {
        **SETTINGS,
        **SCENARIO.get(name, {}),
        "data_path": str(data_path),
        "checkpoint_dir": str(data_path.parent / "saved"),
    }
    if get_model(name) is HybridBlend:
        config, _, (train_data, _, _) = prepare("HybridBlend", folder, config_dict=config_dict)
        parts = [build(str(config[part]), data_path, folder)[0] for part in ("warm_model", "content_model")]
        model = HybridBlend(config, train_data._dataset, *parts)
        return model.eval(), train_data._dataset, None
    config, model, (train_data, _, _) = prepare(name, folder, config_dict=config_dict)
    loss = None
    if not has_nothing_to_train(model):
        trainer = get_trainer(config["MODEL_TYPE"], name)(config, model)
        before = [parameter.detach().clone() for parameter in model.parameters()]
        loss = trainer._train_epoch(train_data, 0)
        loss = float(loss[0] if isinstance(loss, tuple) else loss)
        moved = any(not torch.equal(old, new) for old, new in zip(before, model.parameters()))
        loss = (loss, moved)
    return model.eval(), train_data._dataset, loss


def all_scores(model, dataset):
    """(users x items) full_sort_predict scores of every user."""
    users = torch.arange(1, dataset.user_num)
    with torch.no_grad():
        return model.full_sort_predict(Interaction({dataset.uid_field: users})).reshape(len(users), -1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Per model, trained and scored three times: twice on the same data and seed, once with likes of the
    validation/test items added (the training split, hence training, is the same)."""
    root = tmp_path_factory.mktemp("contract")
    rows, words = topics_rows()
    write_atomic(root / "data", "topics", rows, words)
    cache = {}

    def run(name):
        if name not in cache:
            model, dataset, loss = build(name, root / "data", "topics")
            first = all_scores(model, dataset)
            rescored = all_scores(model, dataset)  # differs only for a model that draws its scores (Random)
            again = all_scores(build(name, root / "data", "topics")[0], dataset)
            tokens = dataset.field2id_token[dataset.iid_field]
            held_out = sorted(set(range(1, dataset.item_num)) - set(np.asarray(dataset.split_items).tolist()))
            present = set(rows)
            extra = [
                (u, tokens[i])
                for u in sorted({u for u, _ in rows} - {"filler"})
                for i in held_out
                if (u, tokens[i]) not in present
            ][::7]
            write_atomic(root / f"data-{name}", "topics", rows + extra, words)
            leaked_model, leaked_dataset, _ = build(name, root / f"data-{name}", "topics")
            assert list(leaked_dataset.field2id_token[leaked_dataset.iid_field]) == list(tokens)
            cache[name] = dict(
                model=model,
                dataset=dataset,
                loss=loss,
                first=first,
                again=again,
                draws_scores=not torch.equal(first, rescored),
                held_out=torch.as_tensor(held_out),
                extra=len(extra),
                leaked=all_scores(leaked_model, leaked_dataset),
            )
        return cache[name]

    return run


def test_the_contract_runs_every_registered_model_and_the_package_docstring_names_them():
    assert set(MODELS) == set(PLUGIN_MODELS) and len(MODELS) >= 9
    for name in MODELS:
        assert name in recbole_fbsm.models.__doc__, f"models/__init__.py's docstring does not name {name}"


@pytest.mark.parametrize("name", MODELS)
def test_one_epoch_trains_or_the_model_says_it_has_nothing_to_train(runs, name):
    run = runs(name)
    if get_model(name) is HybridBlend:
        with pytest.raises(NotImplementedError, match="not trained"):
            run["model"].calculate_loss(None)
    elif has_nothing_to_train(run["model"]):
        assert run["loss"] is None
    else:
        loss, moved = run["loss"]
        assert moved, f"{name}: one training epoch changed no parameter"
        assert np.isfinite(float(loss)), f"{name}: training loss {loss}"


@pytest.mark.parametrize("name", MODELS)
def test_scores_are_finite_of_the_right_shape_and_predict_agrees_with_full_sort(runs, name):
    run = runs(name)
    model, dataset, scores = run["model"], run["dataset"], run["first"]
    assert scores.shape == (dataset.user_num - 1, dataset.item_num)
    candidates = torch.arange(1, dataset.item_num)
    assert torch.isfinite(scores[:, candidates]).all(), f"{name}: a non-finite score of a real item"
    users = torch.arange(1, dataset.user_num).repeat_interleave(3)
    items = candidates[torch.randint(len(candidates), (len(users),), generator=torch.Generator().manual_seed(0))]
    with torch.no_grad():
        pairs = model.predict(Interaction({dataset.uid_field: users, dataset.iid_field: items}))
    assert pairs.shape == (len(users),) and torch.isfinite(pairs).all()
    if not run["draws_scores"]:  # both interfaces give a pair one score
        torch.testing.assert_close(pairs.double(), scores[users - 1, items].double(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_a_validation_or_test_item_never_scores_through_its_own_like(runs, name):
    run = runs(name)
    assert run["extra"] > 0 and len(run["held_out"]) > 0
    held_out = run["held_out"]
    assert torch.equal(run["first"][:, held_out], run["leaked"][:, held_out]), (
        f"{name}: likes of validation/test items changed their scores"
    )


@pytest.mark.parametrize("name", MODELS)
def test_a_seeded_run_repeats_exactly(runs, name):
    run = runs(name)
    assert torch.equal(run["first"], run["again"]), f"{name}: two runs with seed 2020 scored differently"


@pytest.mark.parametrize(
    "name",
    MODELS,
)
def test_the_plugins_interface_methods_document_their_tensors(name):
    model_class = get_model(name)
    for method in CONTRACT_METHODS:
        function = getattr(model_class, method)
        if not function.__module__.startswith("recbole_fbsm"):
            continue  # RecBole's own method: documented (or not) by RecBole
        doc = function.__doc__ or ""  # its own: inspect.getdoc would inherit RecBole's abstract method's
        assert "Args:" in doc and "Returns:" in doc, (
            f"{name}.{method} ({function.__module__}): its docstring needs Args: and Returns: with tensor shapes"
        )
