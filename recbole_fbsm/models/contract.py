"""What the pipeline, the trainer and the serving code may ask of a model beyond RecBole's ``GeneralRecommender``
(``calculate_loss``, ``predict``, ``full_sort_predict``): runtime-checkable protocols, so that code asks
``isinstance(model, ScoresCandidates)``, and a new model learns here which hooks it may offer."""

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class ScoresCandidates(Protocol):
    """Evaluation scores only the evaluated split's items (FBSM, UFSM, CoSim, ItemKNNCBF, the two-tower models)."""

    def score_candidates(self, interaction, candidates):
        """(batch users x len(candidates)) scores; ``candidates``: item ids (long tensor)."""


@runtime_checkable
class PreparesCandidates(Protocol):
    """What depends on the candidates alone done once: the trainer holds the function for one evaluation."""

    def candidate_scorer(self, candidates):
        """A function of an evaluation batch's interaction giving its (users x len(candidates)) scores."""


def candidate_scorer_of(model, candidates):
    """``model``'s function of a batch's interaction giving (users x candidates) scores (RecBole's models: the
    candidates' columns of their full ranking)."""
    if isinstance(model, PreparesCandidates):
        return model.candidate_scorer(candidates)
    if isinstance(model, ScoresCandidates):
        return lambda interaction: model.score_candidates(interaction, candidates)
    return lambda batch: model.full_sort_predict(batch).view(len(batch), -1).index_select(1, candidates)


class CandidateScoring:
    """``score_candidates`` and RecBole's ``full_sort_predict`` through the model's ``candidate_scorer``."""

    def score_candidates(self, interaction, candidates):
        """(batch users x candidates) scores, the candidates prepared for this call alone."""
        return self.candidate_scorer(candidates)(interaction)

    def full_sort_predict(self, interaction):
        """Scores of a batch of users against every item.

        Args:
            interaction (Interaction): ``USER_ID``: the users, a LongTensor of shape [batch_size].

        Returns:
            torch.Tensor: the scores, flattened from shape [batch_size, n_items].
        """
        users = interaction[self.USER_ID]
        return self.score_candidates(interaction, torch.arange(self.n_items, device=users.device)).reshape(-1)


class NothingToTrain:
    """A fixed similarity (CoSim, ItemKNNCBF): the trainer validates it once (``has_nothing_to_train``)."""

    nothing_to_train = True

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        self.fake_loss = torch.nn.Parameter(torch.zeros(1))  # RecBole's trainer needs a parameter

    def calculate_loss(self, interaction):
        """Nothing to learn: a zero that RecBole's trainer can step on.

        Args:
            interaction (Interaction): a training batch (unused).

        Returns:
            torch.nn.Parameter: zero, shape [1].
        """
        return torch.nn.Parameter(torch.zeros(1, device=self.fake_loss.device))


@runtime_checkable
class HasOptimizerGroups(Protocol):
    """The model's own optimizer parameter groups (FBSM: separate learning rates for D and V)."""

    def optimizer_param_groups(self, learning_rate):
        """A list of torch optimizer parameter groups."""


@runtime_checkable
class BuiltFromFittedInputs(Protocol):
    """Built from the pipeline's fitted inputs (``models.inputs``), so it can be saved as an artifact and serve
    new items (FBSM, UFSM, CoSim, ItemKNNCBF, DropoutNet, Heater, ALDI)."""

    def uses_warm_backbone(self, config):
        """Whether training needs the warm BPR-MF backbone (a classmethod)."""


@runtime_checkable
class FeatureSimilarity(Protocol):
    """score(u, i) = f_i^T W_u f_u with W_u = diag(c_u) + V V^T (FBSM, UFSM, CoSim): scores can be explained
    feature by feature."""

    def diagonal_weights(self, users):
        """c_u: (n_features,) shared, or (len(users), n_features)."""

    def diagonal_parts(self, users):
        """(basis (l, n_features), mixture (len(users), l)) with c_u = mixture[u] @ basis."""

    def low_rank_factors(self):
        """V^T (n_features x h), or None."""


@runtime_checkable
class ItemNeighbourhood(Protocol):
    """score(u, i) = sum over u's likes j of sim_k(i, j) (ItemKNNCBF): a like of any item, training or not, can
    be read as one more neighbour, from the rows' similarities (``serve/neighbours.py``)."""

    def neighbour_similarities(self, rows, columns=None):
        """sim_k of feature rows against every training item (dense), k kept per row, j = i dropped."""

    def row_similarities(self, rows, others):
        """sim(i, j)^p of feature rows against other rows (dense), nothing dropped."""


def reads_own_features(model_or_class):
    """True for models that read the item features themselves: the pipeline skips RecBole's feature join."""
    return bool(getattr(model_or_class, "reads_own_features", False))


def has_nothing_to_train(model_or_class):
    """True for models with no parameter to learn (``nothing_to_train``: True, or the words for what the model
    is): the trainer skips the pass over the training data and says so in one line. RecBole's Pop, which counts
    items in ``calculate_loss``, does not declare it."""
    return bool(getattr(model_or_class, "nothing_to_train", False))
