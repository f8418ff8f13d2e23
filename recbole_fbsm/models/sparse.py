"""Vectorised CSR helpers in torch (device-agnostic): row gathers and entry lookups."""

import warnings

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


class TorchCsr(nn.Module):
    """A scipy CSR matrix held as torch buffers (moved with the model, not saved in checkpoints)."""

    def __init__(self, matrix: sp.csr_matrix, dtype=torch.float32):
        super().__init__()
        matrix = sp.csr_matrix(matrix)
        matrix.sort_indices()
        self.shape = matrix.shape
        self.register_buffer("indptr", torch.from_numpy(matrix.indptr.astype(np.int64)), persistent=False)
        self.register_buffer("indices", torch.from_numpy(matrix.indices.astype(np.int64)), persistent=False)
        self.register_buffer("values", torch.as_tensor(matrix.data, dtype=dtype), persistent=False)
        rows = np.repeat(np.arange(matrix.shape[0], dtype=np.int64), np.diff(matrix.indptr))
        # row * n_cols + col, globally sorted: entry lookups by binary search
        self.register_buffer("keys", torch.from_numpy(rows * matrix.shape[1] + matrix.indices), persistent=False)

    def gather_rows(self, rows):
        """Nonzeros of ``self[rows]``: (position in ``rows``, column, value) per entry, and bag offsets."""
        starts = self.indptr[rows]
        counts = self.indptr[rows + 1] - starts
        offsets = torch.cumsum(counts, 0) - counts
        owner = torch.repeat_interleave(torch.arange(len(rows), device=rows.device), counts)
        positions = torch.arange(len(owner), device=rows.device) - offsets[owner] + starts[owner]
        return owner, self.indices[positions], self.values[positions], offsets

    def lookup(self, rows, cols):
        """Entries ``self[rows[n], cols[n]]`` (zero where absent)."""
        if len(self.keys) == 0:
            return torch.zeros(len(rows), dtype=self.values.dtype, device=self.values.device)
        query = rows * self.shape[1] + cols
        found = torch.searchsorted(self.keys, query).clamp_(max=len(self.keys) - 1)
        hit = self.keys[found] == query
        return torch.where(hit, self.values[found], torch.zeros_like(self.values[found]))

    def contains(self, rows, cols):
        if len(self.keys) == 0:
            return torch.zeros(len(rows), dtype=torch.bool, device=rows.device)
        query = rows * self.shape[1] + cols
        found = torch.searchsorted(self.keys, query).clamp_(max=len(self.keys) - 1)
        return self.keys[found] == query

    def dense_rows(self, rows):
        """``self[rows]`` as a dense (len(rows) x n_cols) tensor: fine for a batch of users."""
        owner, cols, values, _ = self.gather_rows(rows)
        dense = torch.zeros(len(rows), self.shape[1], dtype=self.values.dtype, device=self.values.device)
        dense.index_put_((owner, cols), values, accumulate=True)
        return dense

    def to_torch_sparse(self):
        return torch.sparse_csr_tensor(
            self.indptr, self.indices, self.values, size=self.shape, check_invariants=False
        )

    def bag_sum(self, rows, table):
        """Sum over each row's nonzeros of value * table[column]: ``self[rows] @ table``, differentiable
        in ``table`` (an embedding-bag, so no nnz x dim intermediate in the forward pass)."""
        _, cols, values, offsets = self.gather_rows(rows)
        return nn.functional.embedding_bag(
            cols, table, offsets, mode="sum", per_sample_weights=values.to(table.dtype)
        )
