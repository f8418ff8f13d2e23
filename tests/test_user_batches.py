"""Training batches of whole users, and FBSM's profile taken from such a batch."""

import numpy as np
import pytest
import torch

from recbole_fbsm.data.user_batches import UserGroupedBatchSampler
from recbole_fbsm.quick_start import prepare
from helpers import dataset_config


def test_batches_hold_whole_users_cover_every_like_once_and_reshuffle():
    rng = np.random.default_rng(0)
    users = rng.integers(0, 300, size=5000)
    users[:700] = 7  # a user with more likes than a batch gets a batch of their own
    sampler = UserGroupedBatchSampler(users, batch_size=256, generator=torch.Generator().manual_seed(1))
    epochs = []
    for _ in range(2):
        planned = len(sampler)
        batches = list(sampler)
        assert len(batches) == planned
        flat = np.concatenate(batches)
        assert np.array_equal(np.sort(flat), np.arange(len(users))), "each like exactly once per epoch"
        owners = [set(users[b].tolist()) for b in batches]
        for a in range(len(owners)):
            for b in range(a + 1, len(owners)):
                assert not owners[a] & owners[b], "a user split over two batches"
        sizes = np.array([len(b) for b in batches])
        assert np.median(sizes) < 2 * 256 and max(sizes) >= 700
        epochs.append([tuple(b) for b in batches])
    assert epochs[0] != epochs[1], "the order must change between epochs"


def test_fbsm_loss_and_gradient_are_the_same_with_whole_user_batches(toy):
    """The batch profile shortcut gives exactly the loss and gradients of the full-profile path."""
    config, model, (train_data, _, _) = prepare("FBSM", toy.name, config_dict=dataset_config(
        toy, train_batch_by_user=True, train_batch_size=64, rank=3, init_std=0.3))
    model.double()
    for module in (model.F, model.F_U, model.R):
        module.values = module.values.double()
    batch = next(iter(train_data))
    users, positives = batch[model.USER_ID], batch[model.ITEM_ID]
    factors = model.F.bag_sum(positives, model.V)
    assert model.profile_factors_from_batch(users, positives, factors) is not None, "batch is not user-complete"

    def loss_and_grads(use_shortcut):
        model.zero_grad()
        original = type(model).profile_factors_from_batch
        if not use_shortcut:
            model.profile_factors_from_batch = lambda *args: None
        try:
            loss = model.calculate_loss(batch)
        finally:
            model.__dict__.pop("profile_factors_from_batch", None)
        loss.backward()
        return loss.item(), model.D.grad.clone(), model.V.grad.clone()

    fast, slow = loss_and_grads(True), loss_and_grads(False)
    assert fast[0] == pytest.approx(slow[0], rel=1e-12)
    assert torch.allclose(fast[1], slow[1], atol=1e-12) and torch.allclose(fast[2], slow[2], atol=1e-12)


def test_a_batch_missing_a_like_of_its_user_falls_back_to_the_full_profile(toy):
    _, model, (train_data, _, _) = prepare("FBSM", toy.name, config_dict=dataset_config(toy))
    batch = next(iter(train_data))
    users, positives = batch[model.USER_ID], batch[model.ITEM_ID]
    factors = model.F.bag_sum(positives, model.V)
    assert model.profile_factors_from_batch(users[1:], positives[1:], factors[1:]) is None
    duplicated = torch.cat([positives[:1], positives[:-1]])
    assert model.profile_factors_from_batch(users, duplicated, factors) is None or torch.equal(duplicated, positives)


@pytest.mark.parametrize("dense_cells", [1 << 22, 0])  # the dense profile block, and the sum by key
def test_profile_entries_from_a_whole_user_batch_equal_the_global_profiles(toy, monkeypatch, dense_cells):
    """f_u at the entries of a batch's positive and negative items, from the batch's own positives,
    equals F_U (the profiles built from all training likes) at those entries."""
    from recbole_fbsm.models import base

    monkeypatch.setattr(base, "DENSE_PROFILE_CELLS", dense_cells)
    _, model, (train_data, _, _) = prepare("FBSM", toy.name, config_dict=dataset_config(
        toy, train_batch_by_user=True, train_batch_size=64))
    checked = 0
    for batch in train_data:
        users, positives = batch[model.USER_ID], batch[model.ITEM_ID]
        slots = model.whole_user_slots(users, positives)
        assert slots is not None
        items = torch.cat([positives, batch[model.NEG_ITEM_ID]])
        rows = model.F.gather_rows(items)
        owner, cols, _, _ = rows
        entries = model.profile_entries_from_batch(slots, rows, len(users))
        expected = model.F_U.lookup(torch.cat([users, users])[owner], cols)
        assert torch.allclose(entries, expected, atol=1e-6)
        checked += int((expected != 0).sum())
    assert checked > 100


@pytest.mark.parametrize("sample_num", [1, 2])
def test_lean_dynamic_negative_sampling_equals_recboles(toy, sample_num):
    """The whole-user loader's dynamic sampling picks, from the same random draws, exactly the negatives
    RecBole's own dynamic sampling picks: the best scored of ``candidate_num`` candidates per triplet,
    never a positive of the user and never an item outside the training split."""
    dynamic = {"distribution": "uniform", "sample_num": sample_num, "alpha": 1.0, "dynamic": True, "candidate_num": 5}
    _, model, (train_data, _, _) = prepare("FBSM", toy.name, config_dict=dataset_config(
        toy, train_batch_by_user=True, train_batch_size=64, rank=3, init_std=0.3, train_neg_sample_args=dynamic))
    train_data.get_model(model)
    recbole_version = super(type(train_data), train_data)._neg_sampling
    train_items = set(train_data._dataset.split_items.tolist())
    checked = 0
    for index in train_data._index_sampler:
        inter_feat = train_data._dataset.inter_feat[np.asarray(index)]
        np.random.seed(7)
        ours = train_data._neg_sampling(inter_feat.copy() if hasattr(inter_feat, "copy") else inter_feat)
        np.random.seed(7)
        theirs = recbole_version(inter_feat)
        negatives = ours[model.NEG_ITEM_ID]
        assert torch.equal(negatives, theirs[model.NEG_ITEM_ID])
        assert torch.equal(ours[model.USER_ID], theirs[model.USER_ID])
        assert set(negatives.tolist()) <= train_items
        assert not bool(model.R.contains(ours[model.USER_ID], negatives).any())
        checked += len(negatives)
    assert checked == sample_num * len(train_data._dataset.inter_feat)
