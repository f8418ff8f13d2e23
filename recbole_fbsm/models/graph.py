"""RecBole's LightGCN and NGCF with their normalised adjacency built by scipy.sparse's public constructors.

RecBole 1.2.1 fills a ``dok_matrix`` through its private ``_update``, which current scipy no longer has
('dok_matrix' object has no attribute '_update'): both models fail before their first epoch. The matrix is the
same: A = [[0, R], [Rᵀ, 0]] with ones at the training likes, and D^-1/2 A D^-1/2 with D its row counts (+1e-7).
"""

import numpy as np
import scipy.sparse as sp
import torch
from recbole.model.general_recommender.lightgcn import LightGCN as RecBoleLightGCN
from recbole.model.general_recommender.ngcf import NGCF as RecBoleNGCF


def normalized_adjacency(likes, n_users, n_items):
    """D^-1/2 A D^-1/2 of the user-item graph, as RecBole's ``get_norm_adj_mat`` defines it.

    Args:
        likes (scipy.sparse.coo_matrix): the training likes R, of shape [n_users, n_items].
        n_users (int), n_items (int): the sizes of the two sides.

    Returns:
        torch.Tensor: a sparse float32 tensor of shape [n_users + n_items, n_users + n_items].
    """
    size = n_users + n_items
    row = np.concatenate([likes.row, likes.col + n_users])
    col = np.concatenate([likes.col + n_users, likes.row])
    adjacency = sp.coo_matrix((np.ones(len(row), dtype=np.float32), (row, col)), shape=(size, size)).tocsr()
    adjacency.data[:] = 1.0  # a pair listed twice is one edge, as in RecBole's dictionary
    scale = sp.diags(np.power(np.asarray((adjacency > 0).sum(axis=1)).ravel() + 1e-7, -0.5))
    normalized = sp.coo_matrix(scale @ adjacency @ scale)
    indices = torch.from_numpy(np.vstack([normalized.row, normalized.col]).astype(np.int64))
    return torch.sparse_coo_tensor(
        indices, torch.from_numpy(normalized.data.astype(np.float32)), (size, size), check_invariants=False
    )


class LightGCN(RecBoleLightGCN):
    """RecBole's LightGCN, unchanged but for its adjacency matrix (module docstring)."""

    def get_norm_adj_mat(self):
        return normalized_adjacency(self.interaction_matrix, self.n_users, self.n_items)


class NGCF(RecBoleNGCF):
    """RecBole's NGCF, unchanged but for its adjacency matrix (module docstring)."""

    def get_norm_adj_mat(self):
        return normalized_adjacency(self.interaction_matrix, self.n_users, self.n_items)
