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
        self.reset_ties()

    def reset_ties(self):
        """Restart the tie-breaking stream: each evaluation of the same scores gives the same result."""
        self._generator = torch.Generator().manual_seed(int(self.tie_seed))

    def random_tie_topk(self, scores, k):
        """Top-k column indices per row, ordered by score, ties in random order (independent per row).

        Exact and cheaper than sorting random keys: with t the k-th largest score of a row, every item
        scoring above t is in the top-k, and the remaining places go to the items tied at t with the
        largest random keys; the k chosen items are then ordered by (score, random key).
        """
        k = min(k, scores.shape[1])
        keys = torch.rand(scores.shape, generator=self._generator).to(scores.device)
        threshold = torch.topk(scores, k, dim=1).values[:, -1:]
        selection_key = torch.where(scores > threshold, 2.0, torch.where(scores == threshold, keys, -1.0))
        chosen = torch.topk(selection_key, k, dim=1).indices
        by_key = keys.gather(1, chosen).argsort(dim=1, descending=True)
        chosen = chosen.gather(1, by_key)
        by_score = scores.gather(1, chosen).argsort(dim=1, descending=True, stable=True)
        return chosen.gather(1, by_score)

    def eval_batch_collect(self, scores_tensor, interaction, positive_u, positive_i):
        if self.register.need("rec.items") or self.register.need("rec.topk"):
            topk_idx = self.random_tie_topk(scores_tensor, max(self.topk))
            if self.register.need("rec.items"):
                self.data_struct.update_tensor("rec.items", topk_idx)
            if self.register.need("rec.topk"):
                pos_matrix = torch.zeros_like(scores_tensor, dtype=torch.int)
                pos_matrix[positive_u, positive_i] = 1
                pos_len = pos_matrix.sum(dim=1, keepdim=True)
                hits = torch.gather(pos_matrix, dim=1, index=topk_idx)
                self.data_struct.update_tensor("rec.topk", torch.cat((hits, pos_len), dim=1))
        register = self.register
        self.register = _RegisterWithout(register, _TOPK_KEYS)
        try:
            super().eval_batch_collect(scores_tensor, interaction, positive_u, positive_i)
        finally:
            self.register = register
