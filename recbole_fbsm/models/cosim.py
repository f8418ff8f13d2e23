"""CoSim: score(u, i) = sum over u's training likes j != i of cos(f_i, f_j). Nothing to train."""

import torch
from recbole.utils import ModelType

from recbole_fbsm.models.base import FeatureSimilarityRecommender


class CoSim(FeatureSimilarityRecommender):
    """Cosine similarity baseline of the paper. Runs through RecBole's TraditionalTrainer (one pass,
    no learning) so it reports the same metrics in the same pipeline."""

    type = ModelType.TRADITIONAL
    nothing_to_train = True  # a fixed similarity: the trainer validates it once (models.contract)

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        self.fake_loss = torch.nn.Parameter(torch.zeros(1))  # RecBole's trainer needs a parameter

    def diagonal_weights(self, users):
        return torch.ones(self.n_features, dtype=self.F.values.dtype, device=self.F.values.device)

    def calculate_loss(self, interaction):
        """Nothing to learn: a zero that RecBole's trainer can step on.

        Args:
            interaction (Interaction): a training batch (unused).

        Returns:
            torch.nn.Parameter: zero, shape [1].
        """
        return torch.nn.Parameter(torch.zeros(1, device=self.fake_loss.device))
