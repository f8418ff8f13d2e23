"""Fair tie breaking for RecBole's top-k collection.

``torch.topk`` breaks ties by the lowest index, and RecBole's internal item ids follow first appearance
in the interaction file, which correlates with popularity. A model that scores all cold items alike
(Pop, ItemKNN, an empty profile) would look far better than Random for that reason alone. This collector
ranks the columns in a seeded random order, so tied items are ordered at random, and maps the top-k back
to true item ids.
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

    def eval_batch_collect(self, scores_tensor, interaction, positive_u, positive_i):
        n_items = scores_tensor.shape[-1]
        permutation = torch.randperm(n_items, generator=self._generator).to(scores_tensor.device)
        permuted = scores_tensor[:, permutation]
        if self.register.need("rec.items") or self.register.need("rec.topk"):
            _, topk_permuted = torch.topk(permuted, max(self.topk), dim=-1)
            if self.register.need("rec.items"):
                self.data_struct.update_tensor("rec.items", permutation[topk_permuted])
            if self.register.need("rec.topk"):
                position = torch.empty_like(permutation)
                position[permutation] = torch.arange(n_items, device=permutation.device)
                pos_matrix = torch.zeros_like(permuted, dtype=torch.int)
                pos_matrix[positive_u, position[positive_i]] = 1
                pos_len = pos_matrix.sum(dim=1, keepdim=True)
                hits = torch.gather(pos_matrix, dim=1, index=topk_permuted)
                self.data_struct.update_tensor("rec.topk", torch.cat((hits, pos_len), dim=1))
        register = self.register
        self.register = _RegisterWithout(register, _TOPK_KEYS)
        try:
            super().eval_batch_collect(scores_tensor, interaction, positive_u, positive_i)
        finally:
            self.register = register
