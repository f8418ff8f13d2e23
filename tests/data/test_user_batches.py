"""Training batches of whole users, and the loss the feature models compute from such a batch."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from helpers import dataset_config
from recbole.data.interaction import Interaction

from recbole_fbsm.data.user_batches import UserGroupedBatchSampler
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


def per_like_loss(model, batch, loss):
    """The batch's loss like by like, autograd through ``predict`` (``pair_scores``: f_i^T W_u (f_u - s f_i) per
    (user, item) pair, f_u read from F_U): the plain formula the whole-user path must equal."""
    users, positives = batch[model.USER_ID], batch[model.ITEM_ID]
    classes = model.training_items
    terms = []
    for user, positive, negatives in zip(users, positives, batch[model.NEG_ITEM_ID].view(len(users), -1)):

        def scores(items, user=user):
            return model.predict(Interaction({model.USER_ID: user.repeat(len(items)), model.ITEM_ID: items}))

        if loss == "softmax":
            likes = int(model.R.indptr[user + 1] - model.R.indptr[user])
            logits = scores(classes) / (likes * model.softmax_temperature)
            terms.append(-torch.log_softmax(logits, 0)[torch.searchsorted(classes, positive)])
        else:
            candidates = scores(negatives).detach()
            negative = negatives[candidates.argmax()]  # the first best, as argmax
            terms.append(-torch.nn.functional.logsigmoid(scores(positive[None]) - scores(negative[None]))[0])
    return torch.stack(terms).mean()


@pytest.mark.parametrize("model_name, loss", [("FBSM", "softmax"), ("FBSM", "bpr"), ("UFSM", "bpr")])
def test_the_whole_user_loss_and_gradient_equal_the_per_like_formula(toy, model_name, loss):
    """``calculate_loss`` scores every training item for the batch's distinct users at once (``class_scores``): the
    loss and every gradient equal the per-like softmax / BPR computed pair by pair."""
    config, model, (train_data, _, _) = prepare(
        model_name,
        toy.name,
        config_dict=dataset_config(
            toy,
            train_batch_size=64,
            rank=3,
            init_std=0.3,
            n_functions=2,
            fbsm_loss=loss,
            reg_V=0,
            reg_D=0,
            reg_M=0,
            reg_W=0,
        ),
    )
    model.double()
    for module in (model.F, model.R):
        module.values = module.values.double()
    model.F_U = TorchCsr(scipy_matrix(model.R) @ scipy_matrix(model.F), dtype=torch.float64)  # not float32's sums
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    batch = next(iter(train_data))
    assert len(torch.unique(batch[model.USER_ID])) > 1

    def loss_and_grads(compute):
        model.zero_grad()
        value = compute()
        value.backward()
        return [value.item()] + [parameter.grad.clone() for parameter in model.parameters()]

    fast = loss_and_grads(lambda: model.calculate_loss(batch))
    slow = loss_and_grads(lambda: per_like_loss(model, batch, loss))
    assert fast[0] == pytest.approx(slow[0], rel=1e-10)
    assert all(torch.allclose(a, b, rtol=1e-9, atol=1e-12) for a, b in zip(fast[1:], slow[1:]))
