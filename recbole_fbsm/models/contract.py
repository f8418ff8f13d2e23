"""What the pipeline, the trainer and the serving code may ask of a model beyond RecBole's interface.

RecBole's ``GeneralRecommender`` is the base contract (``calculate_loss``, ``predict``,
``full_sort_predict``). The plugin's optional hooks are declared here, as runtime-checkable protocols: code
asks ``isinstance(model, ScoresCandidates)`` rather than probing attributes, and a new model learns from
this file which hooks it may offer.
"""

from typing import Protocol, runtime_checkable


@runtime_checkable
class ScoresCandidates(Protocol):
    """Evaluation scores only the evaluated split's items (FBSM, UFSM, CoSim, ItemKNNCBF, the two-tower models)."""

    def score_candidates(self, interaction, candidates):
        """(batch users x len(candidates)) scores; ``candidates``: item ids (long tensor)."""


@runtime_checkable
class HasOptimizerGroups(Protocol):
    """The model's own optimizer parameter groups (FBSM: separate learning rates for D and V)."""

    def optimizer_param_groups(self, learning_rate):
        """A list of torch optimizer parameter groups."""


@runtime_checkable
class BuiltFromFittedInputs(Protocol):
    """Built from the pipeline's fitted inputs (``models.inputs``: features, likes, warm backbone), so it can
    be saved as an artifact and serve new items (FBSM, UFSM, CoSim, ItemKNNCBF, DropoutNet, Heater, ALDI)."""

    def uses_warm_backbone(self, config):
        """Whether training needs the warm BPR-MF backbone (a classmethod)."""


@runtime_checkable
class FeatureSimilarity(Protocol):
    """score(u, i) = f_i^T W_u f_u with W_u = diag(c_u) + V V^T (FBSM, UFSM, CoSim): scores can be explained
    feature by feature, and a few new items scored item side first."""

    def diagonal_weights(self, users):
        """c_u: (n_features,) shared, or (len(users), n_features)."""

    def diagonal_parts(self, users):
        """(basis (l, n_features), mixture (len(users), l)) with c_u = mixture[u] @ basis."""

    def low_rank_factors(self):
        """V^T (n_features x h), or None."""

    def score_rows_item_side(self, users, item_matrix):
        """``score_feature_rows`` for few items and many users, computed item side first."""


@runtime_checkable
class ItemNeighbourhood(Protocol):
    """score(u, i) = sum over u's likes j of sim_k(i, j) (ItemKNNCBF): a like of any item, training or not, can
    be read as one more neighbour, from the rows' similarities (``serve/neighbours.py``)."""

    def neighbour_similarities(self, rows, columns=None):
        """sim_k of feature rows against every training item (dense), k kept per row, j = i dropped."""

    def row_similarities(self, rows, others):
        """sim(i, j)^p of feature rows against other rows (dense), nothing dropped."""


@runtime_checkable
class ScoresFeatureRows(Protocol):
    """Every model that serves new items: items scored from their feature rows alone (FBSM, UFSM, CoSim:
    f_i^T W_u f_u; DropoutNet, Heater, ALDI: user vector . content tower)."""

    def score_feature_rows(self, users, item_matrix):
        """(len(users) x new items) scores; ``item_matrix``: torch sparse CSR rows weighted like ``F``."""


def reads_own_features(model_or_class):
    """True for models that read the item features themselves (the pipeline then skips RecBole's per-batch
    feature join); RecBole's models do not declare it."""
    return bool(getattr(model_or_class, "reads_own_features", False))


def has_nothing_to_train(model_or_class):
    """True for models with no parameter to learn (CoSim, ItemKNNCBF: a fixed similarity; Random): the trainer
    skips the pass over the training data and says so in one line instead of a "train loss 0.0000" epoch (a
    model's ``nothing_to_train`` is True, or the words for what it is: "a random scorer"). RecBole's own
    traditional models (Pop counts items in ``calculate_loss``) do not declare it."""
    return bool(getattr(model_or_class, "nothing_to_train", False))
