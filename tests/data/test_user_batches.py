"""Training batches of whole users, and FBSM's profile taken from such a batch."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from helpers import dataset_config
from recbole.data.interaction import Interaction

from recbole_fbsm.data.user_batches import UserGroupedBatchSampler, WholeUserInteraction
from recbole_fbsm.kernels.sparse import TorchCsr
from recbole_fbsm.quick_start import prepare


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


def scipy_matrix(csr):
    return sp.csr_matrix((csr.values.numpy(), csr.indices.numpy(), csr.indptr.numpy()), shape=csr.shape)


@pytest.mark.parametrize("model_name", ["FBSM", "UFSM"])
def test_loss_and_gradient_are_the_same_with_whole_user_batches(toy, model_name):
    """The whole-user path (profiles from the batch's positives; FBSM: one hand-written autograd node) gives
    the loss and gradients of the full-profile path (profiles from F_U, autograd through every operation)."""
    config, model, (train_data, _, _) = prepare(
        model_name,
        toy.name,
        config_dict=dataset_config(
            toy, train_batch_by_user=True, train_batch_size=64, rank=3, init_std=0.3, n_functions=2
        ),
    )
    model.double()
    for module in (model.F, model.R):
        module.values = module.values.double()
    model.F_U = TorchCsr(scipy_matrix(model.R) @ scipy_matrix(model.F), dtype=torch.float64)  # not float32's sums
    batch = next(iter(train_data))
    assert isinstance(batch, WholeUserInteraction), "the loader did not mark the batch as whole users"

    def loss_and_grads(interaction):
        model.zero_grad()
        loss = model.calculate_loss(interaction)
        loss.backward()
        return [loss.item()] + [parameter.grad.clone() for parameter in model.parameters()]

    fast, slow = loss_and_grads(batch), loss_and_grads(Interaction(batch.interaction))
    assert fast[0] == pytest.approx(slow[0], rel=1e-12)
    assert len(fast) == 3 and all(torch.allclose(a, b, atol=1e-12) for a, b in zip(fast[1:], slow[1:]))


def test_profile_entries_from_a_whole_user_batch_equal_the_global_profiles(toy):
    """f_u at the entries of a batch's positive and negative items, from the batch's own positives,
    equals F_U (the profiles built from all training likes) at those entries."""
    _, model, (train_data, _, _) = prepare(
        "FBSM", toy.name, config_dict=dataset_config(toy, train_batch_by_user=True, train_batch_size=64)
    )
    checked = 0
    for batch in train_data:
        users, positives = batch[model.USER_ID], batch[model.ITEM_ID]
        whole = batch.whole_users
        owner, cols, _, _ = model.F.gather_rows(torch.cat([positives, batch[model.NEG_ITEM_ID]]))
        entries = whole.profile_at(whole.cells(torch.cat([whole.slots, whole.slots])[owner], cols))
        expected = model.F_U.lookup(torch.cat([users, users])[owner], cols)
        assert torch.allclose(entries, expected, atol=1e-6)
        checked += int((expected != 0).sum())
    assert checked > 100


@pytest.mark.parametrize("model_name", ["FBSM", "UFSM", "CoSim"])
def test_training_candidates_of_whole_users_are_scored_as_predict_scores_them(toy, model_name):
    """Dynamic sampling's candidates, scored from the batch's own positives (``score_training_candidates``),
    get ``predict``'s scores: training likes among them without their own features (estimation constraint)."""
    _, model, (train_data, _, _) = prepare(
        model_name,
        toy.name,
        config_dict=dataset_config(
            toy, train_batch_by_user=True, train_batch_size=64, rank=3, init_std=0.3, n_functions=2
        ),
    )
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    items = torch.as_tensor(train_data._dataset.split_items)
    generator = torch.Generator().manual_seed(0)
    checked_likes = 0
    for batch in train_data:
        users, positives = batch[model.USER_ID], batch[model.ITEM_ID]
        drawn = items[torch.randint(len(items), (3 * len(users),), generator=generator)]
        candidates = torch.cat([drawn, positives.flip(0), positives])  # some are likes of their pair's user
        with torch.no_grad():
            ours = model.score_training_candidates(batch.whole_users, candidates)
            expected = model.predict(Interaction({model.USER_ID: users.repeat(5), model.ITEM_ID: candidates}))
            liked = model.R.contains(users.repeat(5), candidates)
        assert torch.allclose(ours, expected, rtol=1e-5, atol=1e-5)
        checked_likes += int(liked.sum())
    assert checked_likes >= len(train_data._dataset.inter_feat)


def test_candidates_known_to_be_unliked_skip_the_like_check(toy):
    _, model, (train_data, _, _) = prepare(
        "FBSM",
        toy.name,
        config_dict=dataset_config(toy, train_batch_by_user=True, train_batch_size=64, rank=3, init_std=0.3),
    )
    batch = next(iter(train_data))
    positives = batch[model.ITEM_ID]
    candidates = torch.cat([positives, positives])
    with torch.no_grad():
        checked = model.score_training_candidates(batch.whole_users, candidates)
        trusted = model.score_training_candidates(batch.whole_users, candidates, True)
    assert bool((trusted > checked + 1e-6).all()), "a like's own similarity is in its score only when trusted"
