"""Vectorised CSR helpers in torch (device-agnostic): row gathers and entry lookups."""

import copy
import warnings

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


class TorchCsr(nn.Module):
    """A scipy CSR matrix held as torch buffers (moved with the model, not saved in checkpoints)."""

    def __init__(self, matrix, dtype=torch.float32, index_dtype=torch.int64):
        """``matrix``: a scipy sparse matrix, or (indptr, indices, values, shape) of a CSR matrix with sorted row
        indices (held without a copy where their types fit). ``index_dtype`` torch.int32 halves the column indices
        of a matrix gathered now and then (at 10^7 likes the profiles' were 544 MB as int64); gathers return int64."""
        super().__init__()
        if isinstance(matrix, tuple):
            indptr, indices, values, shape = matrix
        else:
            matrix = sp.csr_matrix(matrix)
            matrix.sort_indices()
            indptr, indices, values, shape = matrix.indptr, matrix.indices, matrix.data, matrix.shape
        self.shape = tuple(shape)
        self.register_buffer("indptr", torch.from_numpy(indptr.astype(np.int64, copy=False)), persistent=False)
        indices = indices.astype(numpy_index_type(index_dtype, self.shape[1]), copy=False)
        self.register_buffer("indices", torch.from_numpy(indices), persistent=False)
        self.register_buffer("values", torch.as_tensor(values, dtype=dtype), persistent=False)
        self.register_buffer("_keys", None, persistent=False)  # built on the first lookup: see ``keys``

    @classmethod
    def product(cls, left, right, dtype=torch.float32, rows_per_block=1 << 14, index_dtype=torch.int64):
        """``TorchCsr(left @ right)`` without scipy's whole product beside it: blocks of rows multiplied in turn into
        arrays sized by an upper bound, only the filled part touched (F_U = R F at 10^7 likes: 12 bytes per entry)."""
        left, right = sp.csr_matrix(left), sp.csr_matrix(right)
        n_rows, n_cols = left.shape[0], right.shape[1]
        row_bounds = (
            np.minimum(left.astype(np.int64) @ np.diff(right.indptr).astype(np.int64), n_cols)
            if left.nnz
            else np.zeros(n_rows, dtype=np.int64)
        )
        bound = int(row_bounds.sum())
        indptr = np.zeros(n_rows + 1, dtype=np.int64)
        indices = np.empty(bound, dtype=numpy_index_type(index_dtype, n_cols))
        values = torch.empty(bound, dtype=dtype).numpy()
        filled = 0
        for start in range(0, n_rows, rows_per_block):  # blocks of rows, each one vectorised product
            part = left[start : start + rows_per_block] @ right
            part.sort_indices()
            indices[filled : filled + part.nnz] = part.indices
            values[filled : filled + part.nnz] = part.data
            indptr[start + 1 : start + 1 + part.shape[0]] = filled + part.indptr[1:]
            filled += part.nnz
        return cls((indptr, indices[:filled], values[:filled], (n_rows, n_cols)), dtype, index_dtype)

    @property
    def keys(self):
        """row * n_cols + col of every entry, sorted, for lookups by binary search; built on first use (whole-user
        training never looks an entry up, and at 10^7 likes these keys were 0.8 GB)."""
        if self._keys is None:
            rows = torch.arange(self.shape[0], device=self.indptr.device)
            self._keys = torch.repeat_interleave(rows, torch.diff(self.indptr), output_size=len(self.indices))
            self._keys.mul_(self.shape[1]).add_(self.indices)
        return self._keys

    def gather_rows(self, rows):
        """Nonzeros of ``self[rows]``: (position in ``rows``, column, value) per entry, and bag offsets.

        All gathers are ``index_select``: on CPU it is 3 times faster than advanced indexing (``x[idx]``)."""
        cols, values, offsets, counts = self.gather_bags(rows)
        owner = torch.repeat_interleave(counts, output_size=len(cols))
        return owner, cols, values, offsets

    def gather_bags(self, rows):
        """(columns, values, bag offsets, row lengths) of ``self[rows]``: ``gather_rows`` without the owner of
        each entry, what an embedding bag over the rows needs."""
        positions, offsets, counts = self.positions(rows)
        return (
            self.indices.index_select(0, positions).to(torch.int64),
            self.values.index_select(0, positions),
            offsets,
            counts,
        )

    def positions(self, rows):
        """(positions of ``self[rows]``'s entries in the CSR arrays, bag offsets, row lengths): a cumulative sum of
        steps, 1 inside a row and at a row's first entry the jump from the previous row's end (one pass)."""
        starts = self.indptr.index_select(0, rows)
        stops = self.indptr.index_select(0, rows + 1)
        counts = stops - starts
        ends = torch.cumsum(counts, 0)
        total = int(ends[-1]) if len(ends) else 0
        offsets = ends - counts
        steps = torch.ones(total + 1, dtype=starts.dtype, device=starts.device)
        steps[0] = 0
        steps.index_add_(0, offsets, starts).index_add_(0, ends, stops, alpha=-1)  # the last row's stop lands at total
        return torch.cumsum(steps[:total], 0), offsets, counts

    def lookup(self, rows, cols):
        """Entries ``self[rows[n], cols[n]]`` (zero where absent)."""
        if len(self.keys) == 0:
            return torch.zeros(len(rows), dtype=self.values.dtype, device=self.values.device)
        query = rows * self.shape[1] + cols
        found = torch.searchsorted(self.keys, query).clamp_(max=len(self.keys) - 1)
        hit = self.keys.index_select(0, found) == query
        values = self.values.index_select(0, found)
        return torch.where(hit, values, torch.zeros_like(values))

    def contains(self, rows, cols):
        """Whether each entry ``self[rows[n], cols[n]]`` is a nonzero."""
        query = rows * self.shape[1] + cols
        if len(self.keys) == 0:
            return torch.zeros(len(query), dtype=torch.bool, device=query.device)
        found = torch.searchsorted(self.keys, query).clamp_(max=len(self.keys) - 1)
        return self.keys.index_select(0, found) == query

    def dense_rows(self, rows):
        """``self[rows]`` as a dense (len(rows) x n_cols) tensor: fine for a batch of users."""
        owner, cols, values, _ = self.gather_rows(rows)
        dense = torch.zeros(len(rows) * self.shape[1], dtype=self.values.dtype, device=self.values.device)
        dense.index_add_(0, owner * self.shape[1] + cols, values)
        return dense.view(len(rows), self.shape[1])

    def rows_matrix(self, rows, gathered=None):
        """``self[rows]`` as a torch sparse CSR tensor (len(rows) x n_cols), for sparse x dense products
        (``gathered``: ``gather_rows(rows)`` when the caller has it)."""
        _, cols, values, offsets = self.gather_rows(rows) if gathered is None else gathered
        indptr = torch.cat([offsets, offsets.new_tensor([len(cols)])])
        return torch.sparse_csr_tensor(indptr, cols, values, size=(len(rows), self.shape[1]), check_invariants=False)

    def to_torch_sparse(self):
        return torch.sparse_csr_tensor(
            self.indptr, self.indices.to(torch.int64), self.values, size=self.shape, check_invariants=False
        )

    def bag_sum(self, rows, table):
        """``self[rows] @ table``, differentiable in ``table`` (see ``rows_times_table``)."""
        return rows_times_table(*self.gather_rows(rows), table)


def torch_csr(matrix, device="cpu", dtype=torch.float32):
    """A scipy CSR matrix as torch's sparse CSR tensor (what ``score_feature_rows`` takes)."""
    return torch.sparse_csr_tensor(
        torch.as_tensor(matrix.indptr, dtype=torch.long),
        torch.as_tensor(matrix.indices, dtype=torch.long),
        torch.as_tensor(matrix.data, dtype=dtype),
        size=matrix.shape,
        check_invariants=False,
    ).to(device)


def numpy_index_type(index_dtype, n_cols):
    """The numpy type of column indices held as ``index_dtype``: int32 only where every column fits."""
    return np.int32 if index_dtype == torch.int32 and n_cols <= np.iinfo(np.int32).max else np.int64


def rows_times_table(owner, cols, values, offsets, table):
    """(sparse rows as ``gather_rows`` returns them) @ ``table``, differentiable in ``table``, no nnz x dim
    intermediate. Forward and backward are embedding bags, the backward's over the entries ordered by column:
    torch's own backward comparison-sorts the columns, 20 times the forward's cost on CPU (most of an FBSM step)."""
    return _RowsTimesTable.apply(owner, cols, values.to(table.dtype), offsets, table)


def csr_times_dense(matrix, dense):
    """``matrix`` (a torch sparse CSR tensor, n x m) @ ``dense`` (m x d), as one embedding bag per row: FBGEMM's
    kernel, 2.7 to 3 times faster than ``torch.sparse.mm`` on evaluation's blocks (1 thread), and each row summed
    in column order, so equal rows give bitwise equal results (ties stay ties)."""
    n_rows = matrix.shape[0]
    if n_rows == 0 or dense.shape[1] == 0:
        return torch.zeros(n_rows, dense.shape[1], dtype=dense.dtype, device=dense.device)
    return nn.functional.embedding_bag(
        matrix.col_indices(),
        dense,
        matrix.crow_indices(),
        mode="sum",
        per_sample_weights=matrix.values().to(dense.dtype),
        include_last_offset=True,
    )


class ConstantSparse:
    """A constant sparse matrix A (torch sparse CSR, n x m) for ``A @ X`` differentiable in X: forward and backward
    are ``csr_times_dense`` with A and its transpose. The transpose's pattern is sorted on the first backward (a
    radix sort of the columns); values of the same pattern (``with_values``: identity dropout) reuse it."""

    def __init__(self, matrix):
        self.shape, self.crow, self.col = matrix.shape, matrix.crow_indices(), matrix.col_indices()
        self.values, self._transpose = matrix.values(), None

    def with_values(self, values):
        held = copy.copy(self)
        held.values = values
        return held

    def __matmul__(self, dense):
        return _ConstantTimesDense.apply(self, self.values.to(dense.dtype), dense)

    def columns_below(self, n):
        """The matrix restricted to its first ``n`` columns (n x ... stays n_rows x n)."""
        kept = self.col < n
        rows = torch.repeat_interleave(torch.arange(self.shape[0], device=self.col.device), torch.diff(self.crow))
        counts = torch.bincount(rows[kept], minlength=self.shape[0])
        crow = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        return ConstantSparse(
            torch.sparse_csr_tensor(
                crow, self.col[kept], self.values[kept], size=(self.shape[0], n), check_invariants=False
            )
        )

    def transposed(self, values):
        if self._transpose is None:
            n_rows, n_cols = self.shape
            order = stable_argsort_bounded(self.col, n_cols)
            rows = torch.repeat_interleave(torch.arange(n_rows, device=self.col.device), torch.diff(self.crow))
            crow = torch.cat([self.crow.new_zeros(1), torch.cumsum(torch.bincount(self.col, minlength=n_cols), 0)])
            self._transpose = (crow, rows.index_select(0, order), order)
        crow, col, order = self._transpose
        return torch.sparse_csr_tensor(
            crow, col, values.index_select(0, order), size=self.shape[::-1], check_invariants=False
        )


class _ConstantTimesDense(torch.autograd.Function):
    @staticmethod
    def forward(ctx, constant, values, dense):
        ctx.constant, ctx.values = constant, values
        matrix = torch.sparse_csr_tensor(
            constant.crow, constant.col, values, size=constant.shape, check_invariants=False
        )
        return csr_times_dense(matrix, dense)

    @staticmethod
    def backward(ctx, grad):
        return None, None, csr_times_dense(ctx.constant.transposed(ctx.values), grad.contiguous())


class _RowsTimesTable(torch.autograd.Function):
    @staticmethod
    def forward(ctx, owner, cols, values, offsets, table):
        ctx.save_for_backward(owner, cols, values)
        ctx.n_table_rows = table.shape[0]
        return nn.functional.embedding_bag(cols, table, offsets, mode="sum", per_sample_weights=values)

    @staticmethod
    def backward(ctx, grad_rows):
        if not ctx.needs_input_grad[4]:
            return None, None, None, None, None
        owner, cols, values = ctx.saved_tensors
        return None, None, None, None, table_gradient(owner, cols, values, grad_rows, ctx.n_table_rows)


def table_gradient(owner, cols, values, grad_rows, n_table_rows):
    """The gradient of a table from that of ``rows_times_table``'s rows: (sparse rows)^T @ ``grad_rows``, an
    embedding bag over the entries ordered by column (a radix sort; torch's own embedding-bag backward sorts
    with a comparison sort)."""
    order = stable_argsort_bounded(cols, n_table_rows)
    counts = torch.bincount(cols, minlength=n_table_rows)
    column_offsets = torch.cumsum(counts, 0) - counts
    return nn.functional.embedding_bag(
        owner.index_select(0, order),
        grad_rows.contiguous(),
        column_offsets,
        mode="sum",
        per_sample_weights=values.index_select(0, order),
    )


def stable_argsort_bounded(keys, bound):
    """Stable argsort of non-negative integers below ``bound``. On CPU a least-significant-digit radix
    sort over 16-bit digits (numpy's radix argsort: 10 times faster than torch's CPU sort); elsewhere
    torch's sort (a radix sort on CUDA already)."""
    if keys.device.type != "cpu" or bound > (1 << 32) or len(keys) == 0:
        return torch.sort(keys, stable=True).indices
    array = keys.numpy()
    order = np.argsort(array.astype(np.uint16), kind="stable")
    if bound > (1 << 16):
        high = (array >> 16).astype(np.uint16)
        order = order[np.argsort(high[order], kind="stable")]
    return torch.from_numpy(order.astype(np.int64, copy=False))
