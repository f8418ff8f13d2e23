"""CoSim: score(u, i) = sum over u's training likes j != i of cos(f_i, f_j). Nothing to train."""

import torch
from recbole.utils import ModelType

from recbole_fbsm.models.base import FeatureSimilarityRecommender
from recbole_fbsm.models.contract import NothingToTrain


class CoSim(NothingToTrain, FeatureSimilarityRecommender):
    """Cosine similarity baseline of the paper. Runs through RecBole's TraditionalTrainer (one pass,
    no learning) so it reports the same metrics in the same pipeline."""

    type = ModelType.TRADITIONAL

    def diagonal_weights(self, users):
        return torch.ones(self.n_features, dtype=self.F.values.dtype, device=self.F.values.device)
