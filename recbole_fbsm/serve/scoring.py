"""Batched scores of users against new items' feature rows (sparse x dense products, never a features x features
matrix), and top-k lists with seeded random tie breaking."""

import torch

DEFAULT_CELLS = 1 << 24  # users x items cells per batch


def scipy_to_torch_csr(matrix, device="cpu", dtype=torch.float32):
    return torch.sparse_csr_tensor(
        torch.as_tensor(matrix.indptr, dtype=torch.long),
        torch.as_tensor(matrix.indices, dtype=torch.long),
        torch.as_tensor(matrix.data, dtype=dtype),
        size=matrix.shape,
        check_invariants=False,
    ).to(device)


def iter_profile_scores(model, users, item_matrix, cells=DEFAULT_CELLS):
    """Yield (start, scores) for consecutive batches of ``users``, ``cells`` cells at a time (``score_feature_rows``:
    evaluation's scorer)."""
    step = max(1, cells // max(item_matrix.shape[0], 1))
    for start in range(0, len(users), step):
        yield start, model.score_feature_rows(users[start : start + step], item_matrix)


def ranked(scores, keys, k):
    """Per row, the column positions of the k best (score descending, ties by ``keys`` descending)."""
    k = min(k, scores.shape[1])
    by_key = torch.argsort(keys, dim=1, descending=True)
    by_score = torch.argsort(scores.gather(1, by_key), dim=1, descending=True, stable=True)
    return by_key.gather(1, by_score)[:, :k]


class RunningTopK:
    """The k best columns (``ids``, ``scores``: best first) of every row of a matrix that arrives in column blocks,
    in O(rows x (k + block)) memory; ties broken by a seeded random key per cell."""

    def __init__(self, n_rows, k, seed=0, device="cpu"):
        self.k = k
        self.generator = torch.Generator().manual_seed(int(seed))
        self.scores = torch.empty(n_rows, 0, device=device)
        self.keys = torch.empty(n_rows, 0, device=device)
        self.ids = torch.empty(n_rows, 0, dtype=torch.long, device=device)

    def add(self, scores, ids):
        """``scores``: (n_rows x m) block; ``ids``: the m column ids (long tensor)."""
        keys = torch.rand(scores.shape, generator=self.generator).to(scores.device)
        scores = torch.cat([self.scores, scores.to(self.scores.dtype)], dim=1)
        keys = torch.cat([self.keys, keys], dim=1)
        ids = torch.cat([self.ids, ids[None, :].expand(len(scores), -1)], dim=1)
        best = ranked(scores, keys, self.k)
        self.scores, self.keys, self.ids = scores.gather(1, best), keys.gather(1, best), ids.gather(1, best)
