"""FBSM's sampled softmax (``softmax_negatives: N``): the batch's positives plus N uniformly drawn training items,
logQ-corrected; the full softmax when N covers every training item."""

import math

import numpy as np
import pytest
import torch
from helpers import dataset_config, write_dataset

from recbole_fbsm.quick_start import prepare, run

pytestmark = pytest.mark.usefixtures("workdir")

HYBRID = {
    "cold_start_scenario": "hybrid",
    "metrics": ["Recall", "NDCG"],
    "topk": [5],
    "valid_metric": "recall@5",
    "identity_features": True,
}


@pytest.fixture
def data(tmp_path):
    return write_dataset(tmp_path, "hyb", n_users=50, n_items=80, likes_per_user=(4, 14))


def prepared(data, quiet, **overrides):
    """(model in training mode, a training batch, the training loader's dataset), identity dropout off so that
    two calls of the loss differ only by the sample."""
    settings = {"identity_dropout": 0.0, "softmax_temperature": 0.2, "init_std": 0.3, "reg_V": 0.0, "reg_D": 0.0}
    _, model, (train, valid, test) = prepare(
        "FBSM", data.name, config_dict=dataset_config(data, quiet, **{**HYBRID, **settings, **overrides})
    )
    model.train()
    return model, next(iter(train)), train._dataset, (valid._dataset, test._dataset)


def loss_and_gradients(model, batch):
    model.zero_grad()
    loss = model.calculate_loss(batch)
    loss.backward()
    return loss.detach(), model.V.grad.clone(), model.D.grad.clone()


@pytest.mark.parametrize("covering", [80, 10_000])
def test_negatives_covering_every_training_item_give_the_full_softmax_exactly(data, quiet, covering):
    model, batch, _, _ = prepared(data, quiet, softmax_negatives=None)
    assert len(model.softmax_items) <= covering
    full = loss_and_gradients(model, batch)
    model.softmax_negatives = covering
    state = torch.get_rng_state()
    sampled = loss_and_gradients(model, batch)
    assert torch.equal(torch.get_rng_state(), state), "nothing is drawn when N covers the training items"
    for a, b in zip(full, sampled):
        assert torch.equal(a, b)


def test_the_sample_holds_training_items_only_with_every_positive_once(data, quiet):
    model, batch, _, (valid, test) = prepared(data, quiet, softmax_negatives=7)
    training = set(model.softmax_items.tolist())
    held_out = set(valid.cold_items.tolist()) | set(test.cold_items.tolist())
    assert held_out and not (held_out & training)
    positives = batch["item_id"][:5]
    n = len(training)
    seen = set()
    for _ in range(30):
        classes, log_weights = model.softmax_classes(positives)
        listed = classes.tolist()
        assert listed == sorted(set(listed)), "each item is a class once"
        assert set(listed) <= training and set(positives.tolist()) <= set(listed)
        drawn = [item for item in listed if item not in set(positives.tolist())]
        assert 7 - len(set(positives.tolist())) <= len(drawn) <= 7
        is_positive = torch.isin(classes, positives)
        assert torch.equal(log_weights[is_positive], torch.zeros(int(is_positive.sum())))
        assert torch.allclose(log_weights[~is_positive], torch.tensor(math.log(n / 7)))
        seen |= set(drawn)
    # uniform over the training items: 30 draws of 7 among about 60 reach nearly all of them
    assert len(seen) >= 0.8 * (n - len(set(positives.tolist())))


def test_the_sampled_loss_equals_its_definition_on_the_drawn_classes(data, quiet):
    model, batch, train, _ = prepared(data, quiet, softmax_negatives=9)
    users, positives = batch["user_id"], batch["item_id"]
    state = torch.get_rng_state()
    loss = model.calculate_loss(batch)
    torch.set_rng_state(state)
    classes, _ = model.softmax_classes(positives)
    n = len(model.softmax_items)
    with torch.no_grad():  # scores as evaluation gives them (a training like without its own features)
        scores = model.full_sort_predict({model.USER_ID: users}).view(len(users), -1)[:, classes].double()
        likes = torch.as_tensor(np.diff(train.model_inputs.likes.indptr))[users].double()
        drawn_only = ~torch.isin(classes, positives)
        logits = scores / (likes[:, None] * 0.2) + drawn_only.double() * math.log(n / 9)
        log_p = torch.log_softmax(logits, dim=1)
        expected = -log_p[torch.arange(len(users)), torch.searchsorted(classes, positives)].mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_the_sampled_gradient_matches_finite_differences(data, quiet):
    model, batch, _, _ = prepared(data, quiet, softmax_negatives=9)
    state = torch.get_rng_state()
    _, grad_V, grad_D = loss_and_gradients(model, batch)
    assert grad_V.abs().sum() > 0 and grad_D.abs().sum() > 0
    direction_V = torch.randn(model.V.shape, generator=torch.Generator().manual_seed(1))
    direction_D = torch.randn(model.D.shape, generator=torch.Generator().manual_seed(2))
    slope = float((grad_V * direction_V).sum() + (grad_D * direction_D).sum())
    step = 1e-3
    losses = []
    with torch.no_grad():
        for sign in (1, -1):
            model.V += sign * step * direction_V
            model.D += sign * step * direction_D
            torch.set_rng_state(state)  # the same sample
            losses.append(float(model.calculate_loss(batch)))
            model.V -= sign * step * direction_V
            model.D -= sign * step * direction_D
    assert (losses[0] - losses[1]) / (2 * step) == pytest.approx(slope, rel=2e-2)


def test_seeded_sampled_runs_are_bit_identical(tmp_path, quiet):
    data = write_dataset(tmp_path, "hyb", n_users=50, n_items=80, likes_per_user=(4, 14))
    config = dataset_config(data, quiet, **HYBRID, softmax_negatives=6, epochs=3, valid_before_training=False)
    first, second = run("FBSM", data.name, config_dict=config), run("FBSM", data.name, config_dict=config)
    for key in ("best_valid_score", "test_result", "test_result_cold", "test_result_warm"):
        assert first[key] == second[key]
