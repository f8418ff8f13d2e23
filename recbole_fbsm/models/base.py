"""What FBSM, UFSM and CoSim share: score(u, i) = sum over the user's training likes j != i of sim(i, j).

With f_u = sum of the features of u's training likes (the paper's precomputation), every model here
scores a (user, item) pair as

    f_i^T W_u (f_u - s * f_i),   s = 1 if i is one of u's training likes (estimation constraint) else 0,

with W_u = diag(c_u) + V^T V: CoSim c_u = 1, V = 0 (cosine on L2-normalised features); UFSM
c_u = M[u] @ W (user mixture of global diagonal similarities), V = 0; FBSM c_u = d, V learned.
The diagonal part needs only the entries of f_u at the nonzeros of f_i (a binary search in F_U), the
low-rank part only V f_i and V f_u (embedding bags), so a pair costs O((nnz(f_u) + nnz(f_i)) h).
"""

import torch
from recbole.model.abstract_recommender import GeneralRecommender
from recbole.utils import InputType

from recbole_fbsm.config.schema import setting
from recbole_fbsm.kernels.sparse import (
    TorchCsr,
    csr_times_dense,
    matmul_by_bags,
    rows_times_table,
)
from recbole_fbsm.models.contract import CandidateScoring
from recbole_fbsm.models.inputs import model_inputs
from recbole_fbsm.models.whole_user import WholeUserTraining

# cells of ``score_feature_rows``' dense blocks of profiles and scores (2 MiB of float32): the embedding bags find
# the profiles in the core's cache (benchmarks/bench_eval.py on citeulike-t: 2^19 beat 2^17 and 2^21, 1 thread)
SCORE_BLOCK_CELLS = 1 << 19


def fixed_similarity_words(config, start=""):
    """Plain words for the fixed similarity f_i . f_j of a run's item features, named after the baseline that
    scores with it: FBSM's and UFSM's untrained start (``valid_before_training`` keeps it when no epoch beats
    it). ``start``: the model's initial values, added to the settings in brackets."""
    weighting = str(setting(config, "feature_weighting")).lower()
    shrink = float(setting(config, "feature_shrink"))
    settings = f"feature_weighting: {weighting}, feature_shrink: {shrink:g}" + (f"; {start}" if start else "")
    if setting(config, "feature_normalize") is False:
        return f"the fixed similarity f_i . f_j of its features, rows not normalised ({settings})"
    if weighting == "bm25" and shrink > 0:
        return f"ItemKNNCBF's BM25 similarity with the row shrink ({settings})"
    if weighting == "bm25":
        return f"ItemKNNCBF's BM25 cosine similarity ({settings})"
    if weighting == "tfidf" and shrink == 0:
        return f"CoSim's tf-idf cosine similarity ({settings})"
    return f"the fixed similarity f_i . f_j of its features ({settings})"


class FeatureSimilarityRecommender(WholeUserTraining, CandidateScoring, GeneralRecommender):
    input_type = InputType.PAIRWISE
    reads_own_features = True  # the pipeline skips RecBole's per-batch feature join

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        inputs = model_inputs(config, dataset, self.uses_warm_backbone(config))
        features, likes = inputs.features, inputs.held_likes()
        self.warm_tables = inputs.warm  # (users, items) of the warm backbone, for models that align to it
        self.feature_names = features.names
        self.n_features = features.n_features
        self.n_identity = features.n_identity  # identity columns (the last ones; hybrid FBSM), 0 without
        self.F = TorchCsr(features.matrix)  # items x features
        # users x features: f_u = sum of liked items' f; users x items: training likes. Both are gathered by
        # evaluation and lookups, not by whole-user training steps: their column indices are held as int32
        self.F_U = TorchCsr.product(likes, features.matrix, index_dtype=torch.int32)
        self.R = TorchCsr(likes, index_dtype=torch.int32)
        self.user_weighting = bool(config["bpr_user_weighting"])
        self.profile_alpha = float(setting(config, "bpr_profile_alpha"))

    @classmethod
    def uses_warm_backbone(cls, config):
        """Whether training needs the warm BPR-MF backbone (fitted by the pipeline, not by the model)."""
        return False

    @classmethod
    def untrained_start(cls, config):
        """Plain words for what the untrained model scores with, or None when it is not a fixed similarity worth
        naming (FBSM and UFSM say theirs): the run's last lines use them when the start was kept."""
        return None

    # ------------------------------------------------------------------ per-model similarity parts
    def diagonal_weights(self, users):
        """c_u, the diagonal of W_u.

        Args:
            users: a LongTensor of shape [n_users].

        Returns:
            torch.Tensor: shape [n_features] when shared by all users (FBSM, CoSim), else [n_users, n_features].
        """
        raise NotImplementedError

    def low_rank_factors(self):
        """The low-rank part of W_u = diag(c_u) + V^T V.

        Returns:
            torch.Tensor or None: V^T, shape [n_features, h]; None for purely diagonal similarities.
        """
        return None

    def diagonal_parts(self, users):
        """c_u as a mixture: (basis (l, n_features), mixture (len(users), l)) with c_u = mixture[u] @ basis; a shared
        diagonal is one basis row (UFSM's l functions override this). ``score_rows_item_side`` reads it."""
        weights = self.diagonal_weights(users)
        return weights[None, :], torch.ones(len(users), 1, dtype=weights.dtype, device=weights.device)

    # --------------------------------------------------------------------------------- pair scores
    def pair_scores(self, users, items, self_in_profile, item_rows=None, user_entries=None):
        """score(u, i) = f_i^T W_u (f_u - s f_i) for each (user, item) pair.

        Args:
            users, items: LongTensors of shape [n_pairs].
            self_in_profile: s, a BoolTensor of shape [n_pairs]: whether the item is one of the user's likes.
            item_rows: ``F.gather_rows(items)``, when the caller has it.
            user_entries: f_u at each of those rows' nonzeros, shape [nnz], when the caller has them.

        Returns:
            torch.Tensor: the scores, shape [n_pairs].
        """
        rows = self.F.gather_rows(items) if item_rows is None else item_rows
        owner, cols, f_i, _ = rows
        f_u = self.F_U.lookup(users.index_select(0, owner), cols) if user_entries is None else user_entries
        s = self_in_profile.to(f_i.dtype)
        scores = self.diagonal_sum(users, len(items), owner, cols, f_i * (f_u - s.index_select(0, owner) * f_i))
        factors = self.low_rank_factors()
        if factors is not None:
            unique_users, inverse = torch.unique(users, return_inverse=True)  # V f_u once per distinct user
            v_i = rows_times_table(*rows, factors)
            v_u = self.user_factors(unique_users, factors).index_select(0, inverse)
            scores = scores + (v_i * (v_u - s.to(v_i.dtype)[:, None] * v_i)).sum(-1)
        return scores

    def diagonal_sum(self, users, n_pairs, owner, cols, entries):
        """sum_k c_u[k] a_k per pair, from the entries a_k of each pair's item (pair ``owner``, feature ``cols``)."""
        weights = self.diagonal_weights(users)
        weights = weights.index_select(0, cols) if weights.dim() == 1 else weights[owner, cols]
        return torch.zeros(n_pairs, dtype=entries.dtype, device=entries.device).index_add(0, owner, entries * weights)

    def user_factors(self, users, factors):
        """V f_u for distinct users, as the sum of V f_j over their likes j: cheaper than a bag over f_u's own
        nonzeros (far more than the user's likes), and each liked item's V f_j is computed once per batch."""
        owner, liked, weights, offsets = self.R.gather_rows(users)
        items, position = torch.unique(liked, return_inverse=True)
        item_factors = self.F.bag_sum(items, factors)
        return rows_times_table(owner, position, weights, offsets, item_factors)

    def bpr_difference(self, interaction):
        """r_ui - r_uj for the batch's triplets (i a training like, j a negative); a batch of whole users (carrying
        its ``whole_users``) takes the fast path of ``models.whole_user``.

        Args:
            interaction (Interaction): ``USER_ID``, ``ITEM_ID`` and ``NEG_ITEM_ID``, LongTensors of shape [n].

        Returns:
            torch.Tensor: r_ui - r_uj, shape [n].
        """
        users = interaction[self.USER_ID]
        positives, negatives = interaction[self.ITEM_ID], interaction[self.NEG_ITEM_ID]
        whole_users = getattr(interaction, "whole_users", None)  # the loader's ``WholeUserBatch``
        if whole_users is not None:
            return self.whole_user_difference(whole_users, negatives)
        # positives and negatives in one pass: one gather of F's rows, one embedding bag, one lookup
        n = len(users)
        self_in_profile = torch.arange(2 * n, device=users.device) < n
        scores = self.pair_scores(torch.cat([users, users]), torch.cat([positives, negatives]), self_in_profile)
        return scores[:n] - scores[n:]

    def bpr_loss(self, interaction, difference):
        """Mean -log sigmoid(r_ui - r_uj). ``bpr_user_weighting``: each triplet weighs (mean likes per user) / (the
        user's likes), every user counting the same as in the paper's learner. ``bpr_profile_alpha`` α: the difference
        scaled by (the user's likes)^-α (FISM's normalisation: heavy users' sums saturate the sigmoid)."""
        users = interaction[self.USER_ID]
        if self.profile_alpha or self.user_weighting:
            likes = (self.R.indptr[users + 1] - self.R.indptr[users]).clamp(min=1).to(difference.dtype)
        if self.profile_alpha:
            difference = difference * likes.pow(-self.profile_alpha)
        losses = -torch.nn.functional.logsigmoid(difference)
        if not self.user_weighting:
            return losses.mean()
        mean_likes = len(self.R.indices) / max(int((self.R.indptr[1:] > self.R.indptr[:-1]).sum()), 1)
        return (losses * (mean_likes / likes)).mean()

    def predict(self, interaction):
        """Scores of (user, item) pairs: f_i^T W_u (f_u - s f_i), s = 1 for a training like (``pair_scores``).

        Args:
            interaction (Interaction): ``USER_ID`` and ``ITEM_ID``, LongTensors of shape [n_pairs].

        Returns:
            torch.Tensor: the scores, shape [n_pairs].
        """
        users, items = interaction[self.USER_ID], interaction[self.ITEM_ID]
        return self.pair_scores(users, items, self.R.contains(users, items))

    # ------------------------------------------------------------------------------ full ranking
    def candidate_scorer(self, candidates):
        """A function of an evaluation batch's interaction giving its (users x candidates) scores, from the
        candidates' rows of F only (and their V f_i where ``folds_low_rank`` is false), prepared once here.

        Args:
            candidates: the items scored, a LongTensor of shape [n_candidates].

        Returns:
            callable: interaction (``USER_ID``, a LongTensor of shape [n_users]) -> scores [n_users, n_candidates].
        """
        matrix = self.F.rows_matrix(candidates)
        column_of = torch.full((self.F.shape[0],), -1, dtype=torch.long, device=candidates.device)
        column_of[candidates] = torch.arange(len(candidates), device=candidates.device)
        factors = self.low_rank_factors()
        fold = factors is None or self.folds_low_rank(len(candidates))
        item_factors = None if fold else csr_times_dense(matrix, factors)

        def score(interaction):
            users = interaction[self.USER_ID]
            scores = self.score_feature_rows(users, matrix, item_factors)  # B x C
            # estimation constraint: a training like is scored without its own features
            owner, liked, _, _ = self.R.gather_rows(users)
            column = column_of[liked]
            keep = column >= 0
            if bool(keep.any()):
                owner, liked, column = owner[keep], liked[keep], column[keep]
                scores[owner, column] -= self.self_similarity(users[owner], liked)
            return scores

        return score

    def score_feature_rows(self, users, item_matrix, item_factors=None):
        """(len(users) x n_items) scores f_i^T W_u f_u against the rows of ``item_matrix`` (items x features,
        torch sparse CSR: candidates, or new items weighted like ``F``), without the estimation constraint.
        ``item_factors``: V f_i of the rows, when the caller has them. Users are scored in blocks (``score_block``)."""
        n_items = item_matrix.shape[0]
        factors = self.low_rank_factors()
        if factors is None or self.folds_low_rank(n_items):
            item_factors = None
        elif item_factors is None:
            item_factors = csr_times_dense(item_matrix, factors)
        step = self.score_block_users(n_items)
        scores = torch.empty(len(users), n_items, dtype=self.F_U.values.dtype, device=self.F_U.values.device)
        for start in range(0, len(users), step):
            scores[start : start + step] = self.score_block(
                users[start : start + step], item_matrix, factors, item_factors
            ).T
        return scores

    def score_block_users(self, n_items):
        """Users per block of ``score_feature_rows``: ``SCORE_BLOCK_CELLS`` cells of the wider dense block, a multiple
        of 16 above 16 (whole vectors per row of the profiles: measured faster)."""
        step = max(1, SCORE_BLOCK_CELLS // max(self.n_features, n_items, 1))
        return step - step % 16 if step > 16 else step

    def folds_low_rank(self, n_items):
        """Whether scoring ``n_items`` items folds V V^T f_u into the profiles (a features x h x users GEMM)
        rather than adding (V f_i) . (V f_u) (an items x h x users GEMM): whichever GEMM is smaller."""
        return self.n_features <= n_items

    def score_block(self, users, item_matrix, factors, item_factors=None):
        """(n_items x len(users)) scores: the item rows times the users' weighted profiles (c_u f_u, plus V V^T f_u
        when ``item_factors`` is None, else (V f_i) . (V f_u) added). Every product is an embedding bag (not a
        GEMM), so a user's scores are the same bits in any block."""
        gathered = self.F_U.gather_rows(users)
        profiles = self.weighted_profiles_t(users, gathered)  # features x users
        if factors is None:
            return csr_times_dense(item_matrix, profiles)
        user_factors = rows_times_table(*gathered, factors).T.contiguous()  # h x users
        if item_factors is None:
            return csr_times_dense(item_matrix, profiles + matmul_by_bags(factors, user_factors))
        return csr_times_dense(item_matrix, profiles) + matmul_by_bags(item_factors, user_factors)

    def weighted_profiles_t(self, users, gathered=None):
        """(n_features x len(users)) dense block of c_u * f_u, one column per user, built from F_U's
        nonzeros (``gathered``: ``F_U.gather_rows(users)``; each (user, feature) cell is written once)."""
        owner, cols, values, _ = self.F_U.gather_rows(users) if gathered is None else gathered
        weights = self.diagonal_weights(users)
        if weights.dim() == 1:
            weights = weights.index_select(0, cols)
        else:
            weights = weights.reshape(-1).index_select(0, owner * self.n_features + cols)
        block = torch.zeros(self.n_features * len(users), dtype=values.dtype, device=values.device)
        block.index_copy_(0, cols * len(users) + owner, values * weights)
        return block.view(self.n_features, len(users))

    def score_rows_item_side(self, users, item_matrix):
        """``score_feature_rows`` for few items and many users, item side first: sum_l mixture[u, l] F_U (b_l * f_i)
        (``diagonal_parts``) plus (V f_u) . (V f_i), one sparse x dense product over the profiles' nonzeros."""
        basis, mixture = self.diagonal_parts(users)  # (l, F), (B, l)
        items = item_matrix.to_dense()  # n_items x F
        weighted = (basis[:, None, :] * items[None, :, :]).reshape(-1, items.shape[1])  # (l n_items) x F
        parts = torch.sparse.mm(self.F_U.rows_matrix(users), weighted.T)
        scores = (mixture[:, :, None] * parts.reshape(len(users), basis.shape[0], items.shape[0])).sum(1)
        factors = self.low_rank_factors()
        if factors is not None:
            scores = scores + self.user_factors(users, factors) @ torch.sparse.mm(item_matrix, factors).T
        return scores

    def self_similarity(self, users, items):
        """f_i^T W_u f_i: what the estimation constraint takes off a training like's score.

        Args:
            users, items: LongTensors of shape [n_pairs].

        Returns:
            torch.Tensor: shape [n_pairs].
        """
        owner, cols, f_i, _ = self.F.gather_rows(items)
        result = self.diagonal_sum(users, len(items), owner, cols, f_i * f_i)
        factors = self.low_rank_factors()
        if factors is not None:
            result = result + self.F.bag_sum(items, factors).pow(2).sum(-1)
        return result
