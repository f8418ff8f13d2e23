"""HybridBlend: a warm collaborative model and a content model mixed per user, the hybrid scenario's baseline.

Both models are trained on the same training split (``quick_start.run_blend``); for a user, each one's scores
are standardised (z-scores: the warm model's over the warm candidates, the content model's over every
candidate), a cold item is neutral for the warm model (z = 0: it knows nothing of it, which is not the same
as knowing it is bad; giving it the warm model's lowest score made the blend worse than the content model
alone on citeulike-t), and the blend is w z_warm + (1 - w) z_content, with w chosen on validation.
"""

import torch
from recbole.data.interaction import Interaction
from recbole.model.abstract_recommender import GeneralRecommender
from recbole.utils import InputType

from recbole_fbsm.models.contract import CandidateScoring, candidate_scorer_of

# the blend weights searched on validation (w = 0: the content model alone; w = 1: the warm model, cold items 0)
BLEND_WEIGHTS = tuple(round(0.1 * k, 1) for k in range(11))


def standardised(scores):
    """Each row's z-scores over its finite entries (a row without spread: zeros); infinite entries stay as they are."""
    finite = torch.isfinite(scores)
    values = scores.masked_fill(~finite, float("nan"))  # the means below skip them
    mean = values.nanmean(1, keepdim=True)
    spread = (values - mean).pow(2).nanmean(1, keepdim=True).sqrt()
    z = (values - mean) / torch.where(spread > 0, spread, torch.ones_like(spread))
    return torch.where(finite, z, scores)


class HybridBlend(CandidateScoring, GeneralRecommender):
    """w z_warm + (1 - w) z_content over the candidates (module docstring); ``weight`` is w. Not trained itself:
    ``quick_start.run_blend`` trains its two models and searches w on validation."""

    input_type = InputType.POINTWISE
    scores_cold_items = True  # the trainer must not give cold items the warm model's lowest score: z = 0 does

    def __init__(self, config, dataset, warm_model=None, content_model=None):
        super().__init__(config, dataset)
        self.warm_model, self.content_model = warm_model, content_model
        is_warm = torch.zeros(dataset.item_num, dtype=torch.bool)
        is_warm[torch.as_tensor(dataset.split_items, dtype=torch.long)] = True  # the training split's items
        self.register_buffer("is_warm", is_warm, persistent=False)
        self.weight = 0.5

    def calculate_loss(self, interaction):
        """Not trained: ``quick_start.run_blend`` trains the two models and searches the weight on validation.

        Args:
            interaction (Interaction): a training batch (unused).

        Returns:
            Nothing: raises NotImplementedError.
        """
        raise NotImplementedError("HybridBlend is not trained: its two models are (quick_start.run_blend).")

    def candidate_scorer(self, candidates):
        """A function of a batch's interaction giving the blend's (users x candidates) scores, each model's
        candidates prepared once (``models.contract.candidate_scorer_of``).

        Args:
            candidates: the items scored, a LongTensor of shape [n_candidates].

        Returns:
            callable: interaction (``USER_ID``, a LongTensor of shape [n_users]) -> scores [n_users, n_candidates].
        """
        warm_scorer = candidate_scorer_of(self.warm_model, candidates)
        content_scorer = candidate_scorer_of(self.content_model, candidates)
        warm_columns = self.is_warm.to(candidates.device).index_select(0, candidates)

        def score(interaction):
            warm, content = warm_scorer(interaction), content_scorer(interaction)
            z_warm = torch.zeros_like(content)
            z_warm[:, warm_columns] = standardised(warm[:, warm_columns]).to(content.dtype)
            return self.weight * z_warm + (1.0 - self.weight) * standardised(content)

        return score

    def predict(self, interaction):
        """Blended scores of (user, item) pairs: each pair's entry of its user's full ranking, since the z-scores
        are taken over every candidate of the user, not over the pairs asked for.

        Args:
            interaction (Interaction): ``USER_ID`` and ``ITEM_ID``, LongTensors of shape [n_pairs].

        Returns:
            torch.Tensor: the scores, shape [n_pairs].
        """
        users, items = interaction[self.USER_ID], interaction[self.ITEM_ID]
        distinct, inverse = torch.unique(users, return_inverse=True)
        rows = self.full_sort_predict(Interaction({self.USER_ID: distinct})).view(len(distinct), -1)
        return rows[inverse, items]
