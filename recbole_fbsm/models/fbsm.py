"""FBSM_bpr (Sharma, Zhou, Hu, Karypis, SDM 2015): sim(i, j) = f_i^T (D + V^T V) f_j."""

import torch
from torch import nn

from recbole_fbsm.models.base import FeatureSimilarityRecommender


class FBSM(FeatureSimilarityRecommender):
    """Feature-based factorized Bilinear Similarity Model.

    Parameters: ``D`` (n_features,), the diagonal of D; ``V`` (n_features x h), row p is the paper's
    latent factor v_p (the paper's V is this tensor transposed). Loss, per mini-batch:
    mean BPR over the triplets + λ ||V||_F² + β ||D||², i.e. the objective whose per-triplet SGD
    steps are the paper's updates. ``learning_rate_D`` (the paper's α1) defaults to ``learning_rate`` (α2).

    Initialising D = 1 and V small makes the untrained model CoSim on L2-normalised features.
    """

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        self.rank = int(config["rank"])
        self.reg_V = float(config["reg_V"])
        self.reg_D = float(config["reg_D"])
        self.learning_rate_D = config["learning_rate_D"]
        generator = torch.Generator().manual_seed(int(config["seed"]))
        self.D = nn.Parameter(torch.full((self.n_features,), float(config["init_D"])))
        self.V = nn.Parameter(float(config["init_std"]) * torch.randn(self.n_features, self.rank, generator=generator))

    def diagonal_weights(self, users):
        return self.D

    def low_rank_factors(self):
        return self.V

    def calculate_loss(self, interaction):
        difference = self.bpr_difference(interaction)
        regulariser = self.reg_V * self.V.pow(2).sum() + self.reg_D * self.D.pow(2).sum()
        return self.bpr_loss(interaction, difference) + regulariser

    def optimizer_param_groups(self, learning_rate):
        """The paper's separate learning rates: α1 for D, α2 for V."""
        lr_D = learning_rate if self.learning_rate_D is None else float(self.learning_rate_D)
        return [{"params": [self.D], "lr": lr_D}, {"params": [self.V], "lr": learning_rate}]
