"""Training batches cut on the model's device (data/device_batches.py) against RecBole's whole-user loader."""

import numpy as np
import pytest
import torch
from helpers import dataset_config

from recbole_fbsm.data import sampler as sampler_module
from recbole_fbsm.data.preparation import train_loader_class
from recbole_fbsm.data.sampler import ColdStartSampler, DeviceNegativeSampler
from recbole_fbsm.quick_start import prepare
from recbole_fbsm.runtime import distributed
from recbole_fbsm.training.trainer import get_trainer

DYNAMIC = {"distribution": "uniform", "sample_num": 1, "alpha": 1.0, "dynamic": True, "candidate_num": 5}
UNIFORM = {"distribution": "uniform", "sample_num": 1, "alpha": 1.0, "dynamic": False, "candidate_num": 0}
WARM = {"warm_embedding_size": 8, "warm_epochs": 3, "hidden_sizes": [16, 8]}  # DropoutNet, small and quick


def prepared(data, model="FBSM", **overrides):
    settings = dict(train_batch_size=64, rank=3, init_std=0.3)
    settings.update(overrides)
    return prepare(model, data.name, config_dict=dataset_config(data, **settings))


def recbole_loader(config, train_data, model):
    """RecBole's whole-user loader on the same training split and sampler (``train_batches_on_device`` off)."""
    config["train_batches_on_device"] = False
    try:
        loader = train_loader_class(config, True, train_data._sampler)(
            config, train_data._dataset, train_data._sampler, shuffle=config["shuffle"]
        )
    finally:
        config["train_batches_on_device"] = True
    loader.get_model(model)
    return loader


def test_the_device_loader_serves_the_plugins_models_and_can_be_switched_off(toy):
    for model in ("FBSM", "UFSM"):
        _, _, (train_data, _, _) = prepared(toy, model)
        assert type(train_data).__name__ == "DeviceUserGroupedTrainDataLoader", model
    _, _, (train_data, _, _) = prepared(toy, train_batches_on_device=False)
    assert type(train_data).__name__ == "UserGroupedTrainDataLoader"
    _, _, (train_data, _, _) = prepared(toy, train_batch_by_user=False)
    assert type(train_data).__name__ == "DeviceTrainDataLoader"
    _, _, (train_data, _, _) = prepared(toy, "DropoutNet", **WARM)
    assert type(train_data).__name__ == "DeviceTrainDataLoader"
    _, _, (train_data, _, _) = prepare("BPR", toy.name, config_dict=dataset_config(toy, train_batch_by_user=True))
    assert type(train_data).__name__ == "UserGroupedTrainDataLoader", "RecBole's models read more than three columns"


@pytest.mark.parametrize(
    "negatives, by_user",
    [
        (DYNAMIC, True),
        (UNIFORM, True),
        ({**UNIFORM, "sample_num": 2}, True),
        ({**UNIFORM, "distribution": "popularity"}, True),
        (DYNAMIC, False),
        ({**UNIFORM, "sample_num": 2}, False),
    ],
)
def test_batches_are_recboles_cover_every_like_once_and_never_leave_the_training_split(toy, negatives, by_user):
    config, model, (train_data, valid_data, test_data) = prepared(
        toy, train_neg_sample_args=negatives, train_batch_by_user=by_user
    )
    dataset = train_data._dataset
    likes = sorted(zip(dataset.inter_feat[dataset.uid_field].tolist(), dataset.inter_feat[dataset.iid_field].tolist()))
    train_items = set(dataset.split_items.tolist())
    other_items = set(valid_data._dataset.split_items.tolist()) | set(test_data._dataset.split_items.tolist())
    times = int(negatives["sample_num"])
    reference = recbole_loader(config, train_data, model)
    plans = []
    for _ in range(2):
        assert len(train_data) == len(reference)
        seen, plan = [], []
        for ours, theirs in zip(list(train_data), list(reference)):  # whole epochs (RecBole draws at the end)
            users, positives, negative_items = ours[model.USER_ID], ours[model.ITEM_ID], ours[model.NEG_ITEM_ID]
            # the same plan as RecBole's loader: the same users and positives, batch by batch
            assert torch.equal(users, theirs[model.USER_ID]) and torch.equal(positives, theirs[model.ITEM_ID])
            n = len(users) // times
            assert torch.equal(users, users[:n].repeat(times)) and torch.equal(positives, positives[:n].repeat(times))
            if times == 1 and by_user:
                assert model.whole_user_slots(users, positives) is not None, "a user split over two batches"
            assert set(negative_items.tolist()) <= train_items and not set(negative_items.tolist()) & other_items
            assert not set(positives.tolist()) & other_items
            assert not bool(model.R.contains(users, negative_items).any()), "a negative the user liked"
            seen += zip(users[:n].tolist(), positives[:n].tolist())
            plan.append(tuple(users[:n].tolist()))
        assert sorted(seen) == likes, "every training like exactly once per epoch"
        plans.append(plan)
    assert plans[0] != plans[1], "reshuffled every epoch"


def test_negatives_of_users_with_dislikes_are_their_dislikes(toy):
    _, model, (train_data, _, _) = prepared(toy, train_neg_sample_args=UNIFORM)
    dataset = train_data._dataset
    disliked = {}
    dislikes = dataset.dislike_feat
    for user, item in zip(dislikes[dataset.uid_field].tolist(), dislikes[dataset.iid_field].tolist()):
        disliked.setdefault(user, set()).add(item)
    checked = 0
    for batch in train_data:
        for user, negative in zip(batch[model.USER_ID].tolist(), batch[model.NEG_ITEM_ID].tolist()):
            if user in disliked:
                assert negative in disliked[user]
                checked += 1
    assert checked > 20


def test_device_draws_are_the_numpy_samplers_given_the_same_uniforms(toy, monkeypatch):
    """The uniform free draw (r-th item the user has not liked) is the numpy sampler's formula, draw for draw."""
    _, _, (train_data, _, _) = prepared(toy, train_neg_sample_args=UNIFORM)
    sampler = train_data._sampler
    device_sampler = DeviceNegativeSampler(sampler, "cpu", torch.Generator().manual_seed(0))
    users = np.repeat(np.unique(train_data._dataset.inter_feat[sampler.uid_field].numpy()), 50)
    uniforms = np.random.default_rng(3).random(len(users))
    monkeypatch.setattr(sampler_module.np.random, "random", lambda n: uniforms[:n])
    expected = sampler._uniform_free_positions(users)
    ours = device_sampler.free_positions(torch.from_numpy(users), torch.from_numpy(uniforms))
    assert np.array_equal(ours.numpy(), expected)
    # searched among the users' own likes (a batch's distinct users and each draw's index among them): the same
    order = np.random.default_rng(4).permutation(len(users))[: len(users) // 2]
    some, some_uniforms = torch.from_numpy(users[order]), torch.from_numpy(uniforms[order])
    grouped = device_sampler.free_positions(some, some_uniforms, torch.unique(some, return_inverse=True))
    assert np.array_equal(grouped.numpy(), expected[order])


def deterministic_draws(monkeypatch):
    """Both loaders' negative samplers return the same function of (users, position in the draw), so that
    the two paths see the same triplets and the same dynamic candidates."""

    def draw(pool, users):
        return pool[(users * 31 + np.arange(len(users)) * 7) % len(pool)]

    monkeypatch.setattr(
        ColdStartSampler, "sample_negatives", lambda self, users: draw(self._pools[self.phase], np.asarray(users))
    )
    monkeypatch.setattr(
        DeviceNegativeSampler,
        "sample",
        lambda self, users, groups=None: torch.from_numpy(draw(self.pool.numpy(), users.numpy())),
    )
    monkeypatch.setattr(DeviceNegativeSampler, "excludes_likes", property(lambda self: False))  # draws may be likes


@pytest.mark.parametrize(
    "model_name, settings",
    [
        ("FBSM", {"train_neg_sample_args": DYNAMIC}),
        ("FBSM", {"train_neg_sample_args": UNIFORM}),
        ("UFSM", {"train_neg_sample_args": DYNAMIC}),
        ("FBSM", {"train_neg_sample_args": DYNAMIC, "train_batch_by_user": False}),
        ("DropoutNet", WARM),
    ],
)
def test_an_epoch_on_device_batches_has_the_losses_and_parameters_of_recboles_loader(
    toy, monkeypatch, model_name, settings
):
    """Given the same triplets (and the same dynamic candidates), a trainer's epoch on the device batches and
    on RecBole's loader takes the same steps: every batch's loss and the parameters after the epoch agree."""
    deterministic_draws(monkeypatch)
    config, model, (train_data, _, _) = prepared(toy, model_name, learning_rate=0.05, **settings)
    reference = recbole_loader(config, train_data, model)
    start = {key: value.clone() for key, value in model.state_dict().items()}
    own_generator = getattr(model, "_generator", None)  # DropoutNet's dropout draws
    generator_state = None if own_generator is None else own_generator.get_state()
    outcomes = []
    for loader in (train_data, reference):
        model.load_state_dict(start)
        if own_generator is not None:
            own_generator.set_state(generator_state)
        trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
        losses, calculate_loss = [], model.calculate_loss

        def recorded(interaction, calculate_loss=calculate_loss, losses=losses):
            loss = calculate_loss(interaction)
            losses.append(loss.item())
            return loss

        model.calculate_loss = recorded
        try:
            trainer._train_epoch(loader, 0)
        finally:
            del model.calculate_loss
        outcomes.append((losses, {name: p.detach().clone() for name, p in model.named_parameters()}))
    (ours, ours_params), (theirs, their_params) = outcomes
    assert len(ours) == len(theirs) > 1
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    for name in ours_params:
        torch.testing.assert_close(ours_params[name], their_params[name], rtol=1e-6, atol=1e-6)


def test_one_batch_gives_the_same_loss_and_gradients_through_both_loaders(toy):
    """The device batch and RecBole's batch of the same plan, with the device batch's negatives put into
    RecBole's: the loss and the gradients of D and V are equal (up to rounding: the device batch's loss takes
    its negatives' parts from the scores of its candidates, RecBole's batch computes them again)."""
    config, model, (train_data, _, _) = prepared(toy, train_neg_sample_args=DYNAMIC)
    ours = next(iter(train_data))
    theirs = next(iter(recbole_loader(config, train_data, model)))
    theirs.update(type(theirs)({model.NEG_ITEM_ID: ours[model.NEG_ITEM_ID]}))
    results = []
    for batch in (ours, theirs):
        model.zero_grad()
        loss = model.calculate_loss(batch)
        loss.backward()
        results.append((loss.item(), model.D.grad.clone(), model.V.grad.clone()))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-6)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(results[0][2], results[1][2], rtol=1e-5, atol=1e-7)


def test_each_rank_cuts_its_share_of_every_batch(toy, monkeypatch):
    """With two ranks, each rank's device batches are its users' share of every batch of the one-process plan:
    the same number of steps on both ranks, disjoint users, and every like once across the ranks."""
    config, model, (train_data, _, _) = prepared(toy, train_neg_sample_args=UNIFORM, train_batch_size=32)
    dataset = train_data._dataset
    likes = sorted(zip(dataset.inter_feat[dataset.uid_field].tolist(), dataset.inter_feat[dataset.iid_field].tolist()))
    shares = []
    for rank in range(2):
        monkeypatch.setattr(distributed, "world", lambda rank=rank: (rank, 2))
        loader_class = train_loader_class(config, True, train_data._sampler)
        loader = loader_class(config, dataset, train_data._sampler, shuffle=True)
        loader.get_model(model)
        shares.append([(b[model.USER_ID].tolist(), b[model.ITEM_ID].tolist()) for b in loader])
    assert len(shares[0]) == len(shares[1]) > 1
    seen = []
    for (users_0, items_0), (users_1, items_1) in zip(*shares):
        assert users_0 and users_1 and not set(users_0) & set(users_1)
        seen += zip(users_0 + users_1, items_0 + items_1)
    assert sorted(seen) == likes
