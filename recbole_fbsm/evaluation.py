"""Fair tie breaking for RecBole's top-k collection.

``torch.topk`` breaks ties by the lowest index, and RecBole's internal item ids follow first appearance
in the interaction file, which correlates with popularity. A model that scores all cold items alike
(Pop, ItemKNN, an empty profile) would look far better than Random for that reason alone. This collector
ranks the columns of each row (user) in its own seeded random order, so tied items are ordered at random
independently for every user, and maps the top-k back to true item ids.
"""

import torch
from recbole.evaluator import Collector

_TOPK_KEYS = ("rec.items", "rec.topk")


class _RegisterWithout:
    def __init__(self, register, keys):
        self._register, self._keys = register, set(keys)

    def need(self, key):
        return key not in self._keys and self._register.need(key)


class TieBreakingCollector(Collector):
    """RecBole ``Collector`` whose top-k breaks ties uniformly at random (seeded by ``seed``)."""

    def __init__(self, config):
        super().__init__(config)
        self.tie_seed = config["seed"]
        self.candidates = None  # item id of each score column when scores cover candidates only
        self.reset_ties()

    def reset_ties(self):
        """Restart the tie-breaking stream: each evaluation of the same scores gives the same result."""
        self._generator = torch.Generator().manual_seed(int(self.tie_seed))

    def random_tie_topk(self, scores, k):
        """Top-k column indices per row, ordered by score, ties in random order (independent per row).

        Exact and cheaper than sorting random keys: one ``topk`` of k + 1 columns shows which rows have
        items outside the first k tied with the k-th score. Only those rows draw random keys over all
        their columns (the items tied at the k-th score compete for the remaining places by key); every
        other row's top-k set is already unique. The k chosen items are then ordered by score, equal
        scores in a fresh random order.
        """
        n_rows, n_cols = scores.shape
        k = min(k, n_cols)
        top = torch.topk(scores, min(k + 1, n_cols), dim=1)
        chosen = top.indices[:, :k].clone()
        if n_cols > k:
            threshold = top.values[:, k - 1:k]
            rows = torch.nonzero(top.values[:, k] == threshold[:, 0]).squeeze(1)
            if len(rows):
                tied, level = scores[rows], threshold[rows]
                keys = torch.rand(tied.shape, generator=self._generator).to(scores.device)
                selection_key = torch.where(tied > level, 2.0, torch.where(tied == level, keys, -1.0))
                chosen[rows] = torch.topk(selection_key, k, dim=1).indices
        keys = torch.rand(chosen.shape, generator=self._generator).to(scores.device)
        chosen = chosen.gather(1, keys.argsort(dim=1, descending=True))
        by_score = scores.gather(1, chosen).argsort(dim=1, descending=True, stable=True)
        return chosen.gather(1, by_score)

    def eval_batch_collect(self, scores_tensor, interaction, positive_u, positive_i):
        candidates = self.candidates
        shortfall = max(self.topk) - scores_tensor.shape[1]
        if candidates is not None and shortfall > 0:
            # fewer candidates than k: the list ends with never-relevant fillers (RecBole's padding item 0),
            # as it did when the other splits' items scored -inf
            filler = torch.full((len(scores_tensor), shortfall), -torch.inf, device=scores_tensor.device)
            scores_tensor = torch.cat([scores_tensor, filler], dim=1)
            candidates = torch.cat([candidates, candidates.new_zeros(shortfall)])
        if self.register.need("rec.items") or self.register.need("rec.topk"):
            topk_idx = self.random_tie_topk(scores_tensor, max(self.topk))
            if self.register.need("rec.items"):
                items = topk_idx if candidates is None else candidates[topk_idx]
                self.data_struct.update_tensor("rec.items", items)
            if self.register.need("rec.topk"):
                hits, pos_len = _hits(scores_tensor.shape, topk_idx, positive_u, positive_i)
                self.data_struct.update_tensor("rec.topk", torch.cat((hits, pos_len), dim=1))
        register = self.register
        self.register = _RegisterWithout(register, _TOPK_KEYS)
        try:
            super().eval_batch_collect(scores_tensor, interaction, positive_u, positive_i)
        finally:
            self.register = register


def _hits(shape, topk_idx, positive_u, positive_i):
    """1 where a top-k column is a positive of its row, and each row's number of positives, by binary
    search in the sorted (row, column) keys of the positives: no dense rows x columns matrix."""
    n_rows, n_cols = shape
    device = topk_idx.device
    positive_u, positive_i = positive_u.to(device).long(), positive_i.to(device).long()
    positive_keys = torch.unique(positive_u * n_cols + positive_i)  # sorted, duplicates merged
    pos_len = torch.bincount(torch.div(positive_keys, n_cols, rounding_mode="floor"), minlength=n_rows)
    queries = torch.arange(n_rows, device=device)[:, None] * n_cols + topk_idx
    if len(positive_keys) == 0:
        return torch.zeros_like(queries, dtype=torch.int), pos_len[:, None].int()
    found = torch.searchsorted(positive_keys, queries).clamp_(max=len(positive_keys) - 1)
    return (positive_keys[found] == queries).int(), pos_len[:, None].int()
