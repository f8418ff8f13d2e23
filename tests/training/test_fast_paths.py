"""The fast paths of a training step give the same numbers as the plain formulas they replace:
the radix-sorted embedding-bag backward, the row gather, the constant sparse product, the fused optimizer,
and λ, β as weight decay; and evaluation's sparse x dense product as
embedding bags."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from helpers import dataset_config

from recbole_fbsm.kernels.sparse import (
    ConstantSparse,
    TorchCsr,
    csr_times_dense,
    rows_times_table,
    stable_argsort_bounded,
)
from recbole_fbsm.quick_start import prepare
from recbole_fbsm.training.trainer import fused_if_possible, get_trainer


@pytest.mark.parametrize("bound", [50, 70_000, 3_000_000_000])  # one 16-bit pass, two passes, torch's sort
def test_stable_argsort_bounded_equals_a_stable_sort(bound):
    rng = np.random.default_rng(0)
    keys = rng.integers(0, min(bound, 1 << 40), size=5000)
    keys[:300] = keys[300]  # many ties: stability matters
    order = stable_argsort_bounded(torch.from_numpy(keys), bound)
    assert np.array_equal(order.numpy(), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("n_cols", [40, 70_000])
def test_rows_times_table_value_and_gradient_equal_the_dense_product(n_cols):
    """Forward = F[rows] @ table; backward = F[rows]^T @ grad, repeated rows and empty rows included."""
    rng = np.random.default_rng(1)
    matrix = sp.random(30, n_cols, density=min(0.2, 200 / n_cols), random_state=rng, format="csr")
    matrix.data = rng.normal(size=matrix.nnz)
    matrix.data[matrix.indptr[5] : matrix.indptr[6]] = 0  # an empty row
    matrix.eliminate_zeros()
    csr = TorchCsr(matrix, dtype=torch.float64)
    rows = torch.tensor([3, 5, 3, 29, 0, 7, 7])
    table = torch.randn(n_cols, 4, dtype=torch.float64, requires_grad=True)
    out = rows_times_table(*csr.gather_rows(rows), table)
    weights = torch.randn_like(out)
    (out * weights).sum().backward()
    dense = torch.from_numpy(matrix.toarray())[rows]
    assert torch.allclose(out, dense @ table.detach(), atol=1e-12)
    assert torch.allclose(table.grad, dense.T @ weights, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_csr_times_dense_equals_the_dense_product(dtype):
    """Repeated rows, an empty row, no rows and no columns; equal rows give bitwise equal rows (evaluation's
    ties stay ties)."""
    rng = np.random.default_rng(2)
    matrix = sp.random(30, 50, density=0.2, random_state=rng, format="csr")
    matrix.data = rng.normal(size=matrix.nnz)
    matrix.data[matrix.indptr[5] : matrix.indptr[6]] = 0  # an empty row
    matrix.eliminate_zeros()
    csr = TorchCsr(matrix, dtype=dtype)
    rows = csr.rows_matrix(torch.tensor([3, 5, 3, 29, 0, 7]))
    dense = torch.randn(50, 7, dtype=dtype)
    out = csr_times_dense(rows, dense)
    torch.testing.assert_close(out, rows.to_dense() @ dense)
    assert torch.equal(out[0], out[2]) and not out[1].any()
    assert csr_times_dense(csr.rows_matrix(torch.zeros(0, dtype=torch.long)), dense).shape == (0, 7)
    assert csr_times_dense(rows, dense[:, :0]).shape == (6, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_constant_sparse_product_and_its_gradient_equal_the_dense_product(dtype):
    """``ConstantSparse``: A @ X and the gradient A^T G through the transpose sorted once, also with new values of
    the same pattern (``with_values``) and restricted to the first columns (``columns_below``)."""
    rng = np.random.default_rng(7)
    matrix = sp.random(30, 50, density=0.2, random_state=rng, format="csr")
    torch_csr = torch.sparse_csr_tensor(
        torch.from_numpy(matrix.indptr).long(),
        torch.from_numpy(matrix.indices).long(),
        torch.tensor(matrix.data, dtype=dtype),
        size=matrix.shape,
    )
    constant = ConstantSparse(torch_csr)
    for values, columns in ((torch_csr.values(), 50), (torch_csr.values() * -2, 50), (torch_csr.values(), 20)):
        held = constant.with_values(values) if columns == 50 else constant.columns_below(columns)
        dense = torch.sparse_csr_tensor(
            torch_csr.crow_indices(), torch_csr.col_indices(), values, size=(30, 50)
        ).to_dense()[:, :columns]
        x = torch.randn(columns, 4, dtype=dtype, requires_grad=True)
        x_dense = x.detach().clone().requires_grad_(True)
        weights = torch.randn(30, 4, dtype=dtype)
        ((held @ x) * weights).sum().backward()
        ((dense @ x_dense) * weights).sum().backward()
        torch.testing.assert_close(held @ x, dense @ x_dense)
        torch.testing.assert_close(x.grad, x_dense.grad)


def _csr_with_empty_rows(n_rows=40, n_cols=30, seed=2):
    rng = np.random.default_rng(seed)
    matrix = sp.random(n_rows, n_cols, density=0.2, random_state=rng, format="lil")
    for row in (0, 3, n_rows - 1):  # empty rows first, inside and last
        matrix[row] = 0
    matrix = matrix.tocsr()
    matrix.eliminate_zeros()
    matrix.data = rng.normal(size=matrix.nnz)
    return matrix


@pytest.mark.parametrize("rows", [[0, 3, 39, 0], [39, 39], [], [5, 0, 7, 3, 3, 39, 1], [0], [7]])
def test_gather_rows_and_gather_bags_equal_scipys_row_selection(rows):
    """The cumulative-sum gather, rows without entries anywhere (first, inside, last, repeated)."""
    matrix = _csr_with_empty_rows()
    csr = TorchCsr(matrix, dtype=torch.float64)
    rows = torch.tensor(rows, dtype=torch.long)
    owner, cols, values, offsets = csr.gather_rows(rows)
    bag_cols, bag_values, bag_offsets, bag_counts = csr.gather_bags(rows)
    expected = matrix[rows.numpy()].tocsr() if len(rows) else sp.csr_matrix((0, matrix.shape[1]))
    assert np.array_equal(cols.numpy(), expected.indices) and np.array_equal(values.numpy(), expected.data)
    assert np.array_equal(offsets.numpy(), expected.indptr[:-1])
    assert np.array_equal(owner.numpy(), np.repeat(np.arange(len(rows)), np.diff(expected.indptr)))
    assert torch.equal(bag_cols, cols) and torch.equal(bag_values, values) and torch.equal(bag_offsets, offsets)
    assert np.array_equal(bag_counts.numpy(), np.diff(expected.indptr))


def _one_step(config_dict, toy, regulariser_in_optimizer):
    """D and V after one optimizer step on the first batch, with λ, β in the optimizer or in the loss."""
    config, model, (train_data, _, _) = prepare("FBSM", toy.name, config_dict=config_dict)
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    assert model.regulariser_in_optimizer == (config["learner"] in ("adam", "sgd"))
    if not regulariser_in_optimizer:  # the objective written out: λ ||V||² + β ||D||² in the loss
        model.regulariser_in_optimizer = False
        for group in trainer.optimizer.param_groups:
            group["weight_decay"] = 0.0
    batch = next(iter(train_data))
    trainer.optimizer.zero_grad()
    model.calculate_loss(batch).backward()
    trainer.optimizer.step()
    return model.D.detach().clone(), model.V.detach().clone()


@pytest.mark.parametrize("learner", ["sgd", "adam"])
def test_regulariser_as_weight_decay_is_the_same_step_as_in_the_loss(toy, learner):
    config_dict = dataset_config(
        toy, learner=learner, learning_rate=0.5, reg_V=0.3, reg_D=0.2, rank=3, init_std=0.3, train_batch_size=64
    )
    with_decay = _one_step(config_dict, toy, True)
    in_loss = _one_step(config_dict, toy, False)
    assert torch.allclose(with_decay[0], in_loss[0], atol=1e-6) and torch.allclose(with_decay[1], in_loss[1], atol=1e-6)
    start = _one_step({**config_dict, "learning_rate": 0.0, "learning_rate_D": 0.0}, toy, True)
    assert not torch.allclose(start[1], with_decay[1]), "the step must move V (the test would be empty)"


def test_adamw_keeps_the_regulariser_in_the_loss(toy):
    """AdamW decays the weights outside the gradient: λ, β must then stay in the loss."""
    config, model, (train_data, _, _) = prepare("FBSM", toy.name, config_dict=dataset_config(toy, learner="adamw"))
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    assert not model.regulariser_in_optimizer
    assert all(group["weight_decay"] == 0 for group in trainer.optimizer.param_groups)


def test_adam_is_fused_with_the_same_groups():
    D, V = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(3, 2))
    plain = torch.optim.Adam([{"params": [D], "lr": 0.1, "weight_decay": 0.5}, {"params": [V], "lr": 0.01}], lr=0.01)
    fused = fused_if_possible(plain)
    assert type(fused) is torch.optim.Adam and fused.defaults["fused"]
    assert [(g["lr"], g["weight_decay"], g["fused"]) for g in fused.param_groups] == [(0.1, 0.5, True), (0.01, 0, True)]
    sgd = torch.optim.SGD([V], lr=0.1)
    assert fused_if_possible(sgd) is sgd


def test_sgd_with_a_clip_is_torchs_sgd_and_recboles_loop_clips(toy):
    """FBSM with sgd and clip_grad_norm: torch's SGD with the model's weight-decay groups, and the trainer keeps
    the clip for RecBole's loop (``clip_grad_norm_`` before each step)."""
    clipped = {"learner": "sgd", "learning_rate": 0.3, "learning_rate_D": None, "clip_grad_norm": {"max_norm": 5}}
    config, model, _ = prepare("FBSM", toy.name, config_dict=dataset_config(toy, **clipped))
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    assert type(trainer.optimizer) is torch.optim.SGD and trainer.clip_grad_norm == {"max_norm": 5}
    assert [g["weight_decay"] for g in trainer.optimizer.param_groups] == [2 * model.reg_D, 2 * model.reg_V]
