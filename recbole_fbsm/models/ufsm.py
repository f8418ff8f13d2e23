"""UFSM_bpr (Elbadrawy & Karypis; the FBSM paper's baseline): user-specific mixtures of l global
linear similarity functions, gsim_d(i, j) = w_d . (f_i * f_j), sim_u(i, j) = sum_d m_ud gsim_d(i, j)."""

import torch
from torch import nn

from recbole_fbsm.models.base import FeatureSimilarityRecommender, fixed_similarity_words


class UFSM(FeatureSimilarityRecommender):
    """Parameters: ``W`` (l x n_features, the global similarity weights w_d) and ``M``
    (n_users x l, the users' mixture weights m_u). Loss: BPR + λ ||m_u||² (batch users) + μ1 ||W||²."""

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        self.n_functions = int(config["n_functions"])
        self.reg_M = float(config["reg_M"])
        self.reg_W = float(config["reg_W"])
        # W = 1, M = 1/l starts from the fixed similarity f_i . f_j exactly; the noise only breaks the symmetry
        # of l > 1 functions (with l = 1 there is none to break, and noise would make the start differ from it)
        std = float(config["init_std"]) if self.n_functions > 1 else 0.0
        generator = torch.Generator().manual_seed(int(config["seed"]))
        self.W = nn.Parameter(
            float(config["init_W"]) + std * torch.randn(self.n_functions, self.n_features, generator=generator)
        )
        self.M = nn.Parameter(
            1.0 / self.n_functions + std * torch.randn(self.n_users, self.n_functions, generator=generator)
        )

    @classmethod
    def untrained_start(cls, config):
        return fixed_similarity_words(config, f"W = {float(config['init_W']):g}, M = 1/l")

    def diagonal_weights(self, users):
        return self.M[users] @ self.W

    def diagonal_parts(self, users):
        return self.W, self.M[users]

    def diagonal_sum(self, users, n_pairs, owner, cols, entries):
        """sum_d m_ud sum_k w_dk a_k per pair: W gathered per nonzero, never a (pairs x features) matrix of c_u."""
        per_function = torch.zeros(n_pairs, self.n_functions, dtype=self.W.dtype, device=self.W.device)
        per_function = per_function.index_add(0, owner, entries[:, None] * self.W.T.index_select(0, cols))
        return (per_function * self.M.index_select(0, users)).sum(-1)

    def calculate_loss(self, interaction):
        """BPR on the batch's (like, negative) score differences, with the L2 of M (the batch's users) and W.

        Args:
            interaction (Interaction): a training batch: ``USER_ID`` and ``ITEM_ID`` (a liked training item),
                LongTensors of shape [batch_size].

        Returns:
            torch.Tensor: the batch's loss, a scalar.
        """
        users = interaction[self.USER_ID]
        regulariser = self.reg_M * self.M[users].pow(2).sum(-1).mean() + self.reg_W * self.W.pow(2).sum()
        return self.whole_user_loss(interaction, "bpr") + regulariser
