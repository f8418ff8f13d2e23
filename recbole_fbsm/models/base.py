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
    ConstantSparse,
    TorchCsr,
    rows_times_table,
)
from recbole_fbsm.models.contract import CandidateScoring
from recbole_fbsm.models.inputs import model_inputs

# users x items cells of ``score_feature_rows``' blocks (16 MiB of float32 scores)
SCORE_BLOCK_CELLS = 1 << 22


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


def class_softmax_loss(logits, positive, slot):
    """Mean over the pairs (``positive``, ``slot``) of -log softmax over the classes (dim 0) of ``logits`` (classes x
    users): ``cross_entropy`` without its transposed copy, the softmax kept for the backward."""
    return _ClassSoftmaxLoss.apply(logits, positive, slot)


class _ClassSoftmaxLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, positive, slot):
        top = logits.amax(0)
        probability = torch.exp(logits - top)
        total = probability.sum(0)
        probability.div_(total)
        ctx.save_for_backward(probability, positive, slot)
        return (top + total.log()).index_select(0, slot).mean() - logits[positive, slot].mean()

    @staticmethod
    def backward(ctx, grad):
        probability, positive, slot = ctx.saved_tensors
        n = len(positive)
        grad_logits = probability.mul_(torch.bincount(slot, minlength=probability.shape[1]) * (grad / n))
        return grad_logits.index_put_((positive, slot), -grad / n, accumulate=True), None, None


class FeatureSimilarityRecommender(CandidateScoring, GeneralRecommender):
    input_type = InputType.PAIRWISE
    picks_negatives = True  # dynamic sampling: the loss takes the best scored of the sampler's candidates
    reads_own_features = True  # the pipeline skips RecBole's per-batch feature join

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        inputs = model_inputs(config, dataset, self.uses_warm_backbone(config))
        features, likes = inputs.features, inputs.likes
        self.warm_tables = inputs.warm  # (users, items) of the warm backbone, for models that align to it
        self.feature_names = features.names
        self.n_features = features.n_features
        self.n_identity = features.n_identity  # identity columns (the last ones; hybrid FBSM), 0 without
        self.n_content = self.n_features - self.n_identity
        self.F = TorchCsr(features.matrix)  # items x features
        # users x features: f_u = sum of liked items' f; users x items: training likes. Both are gathered by
        # evaluation and lookups, not by whole-user training steps: their column indices are held as int32
        self.F_U = TorchCsr.product(likes, features.matrix, index_dtype=torch.int32)
        self.R = TorchCsr(likes, index_dtype=torch.int32)
        # the training items (sorted): the classes of the losses (negatives and softmax) and nothing else
        items = torch.unique(torch.as_tensor(inputs.training_items, dtype=torch.long))
        self.register_buffer("training_items", items, persistent=False)
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
        diagonal is one basis row (UFSM's l functions override this). The live service reads it."""
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

    # ------------------------------------------------------------------------------------ training
    def class_scores(self, users):
        """Every score the losses need in one pass: S[c, b] = f_c^T W_u (f_u - s f_c) for every class item c (the
        training items) and the batch's distinct users, s = 1 where c is one of u's training likes. Two sparse x
        dense products and one GEMM, differentiable in the parameters; the classes' V f_c computed once per batch.
        The diagonal part skips the identity columns: there f_u meets f_c only when u likes c, and s takes it off.

        Args:
            users: the batch's distinct users, a LongTensor of shape [B].

        Returns:
            (torch.Tensor, tuple): S, shape [C, B] (classes by users: the backward needs no transpose); and
            (column, owner) of the users' training likes among the classes (class ``column``, user ``owner``).
        """
        classes = self.training_items
        items, content_items = self.class_matrices()  # C x F, C x content features
        factors = self.low_rank_factors()
        item_factors = None if factors is None else items @ factors
        scores = self.item_user_scores(users, content_items, item_factors)
        return self.without_own_features(scores, users, classes, item_factors)

    def item_user_scores(self, users, content_items, item_factors=None):
        """(n_items x len(users)) f_i^T W_u f_u, without the estimation constraint: the items' content rows times the
        users' weighted profiles (a sparse x dense product), plus (V f_i) . (V f_u) (a GEMM). The identity columns
        are left out of the diagonal: there f_u meets f_i only when u likes i, which the constraint takes off.

        Args:
            users: a LongTensor of shape [B].
            content_items: the items' rows of F's content columns, a ``ConstantSparse`` (n_items x content).
            item_factors: V f_i of the items, shape [n_items, h], or None for a diagonal similarity.

        Returns:
            torch.Tensor: shape [n_items, B].
        """
        scores = content_items @ self.weighted_profiles_t(users, columns=content_items.shape[1])
        factors = self.low_rank_factors()
        if factors is None:
            return scores
        user_factors = ConstantSparse(self.F_U.rows_matrix(users)) @ factors
        return torch.addmm(scores, item_factors, user_factors.T)

    def without_own_features(self, scores, users, items, item_factors=None):
        """``scores`` (items x users, as ``item_user_scores``) with the estimation constraint: a user's training like
        scored without its own features (f_i^T W_u f_i off, the identity columns' diagonal left out as there).

        Returns:
            (torch.Tensor, tuple): the scores; (row, owner): the likes' item rows and user columns in ``scores``.
        """
        owner, liked, _, _ = self.R.gather_rows(users)
        row = torch.searchsorted(items, liked).clamp(max=max(len(items) - 1, 0))
        keep = items.index_select(0, row) == liked
        owner, liked, row = owner[keep], liked[keep], row[keep]
        like_owner, like_cols, like_values, _ = self.F.gather_rows(liked)
        squares = like_values.square() * (like_cols < self.n_content)
        own = self.diagonal_sum(users.index_select(0, owner), len(liked), like_owner, like_cols, squares)
        if item_factors is not None:
            own = own + item_factors.index_select(0, row).square().sum(1)
        return scores.index_put_((row, owner), -own, accumulate=True), (row, owner)

    def class_matrices(self):
        """The training items' rows of F (C x F) and of its content columns, as ``ConstantSparse``, built once; F's
        current values (identity dropout changes them) gathered into the first each time."""
        if getattr(self, "_class_matrices", None) is None:
            items = ConstantSparse(self.F.rows_matrix(self.training_items))
            positions = self.F.positions(self.training_items)[0]
            self._class_matrices = (positions, items, items.columns_below(self.n_content))
        positions, items, content_items = self._class_matrices
        return items.with_values(self.F.values.index_select(0, positions)), content_items

    def whole_user_loss(self, interaction, loss="bpr", temperature=1.0):
        """The loss of a training batch from ``class_scores`` of its distinct users: every (user, like) of the batch
        is a positive.

        - ``bpr``: mean -log sigmoid(r_ui - r_uj), j the loader's negative (the sampler's: a dislike, or a training
          item u does not like), or the highest scored of its ``candidate_num`` candidates (dynamic sampling).
        - ``softmax``: mean -log softmax over every training item of the scores / (|I_u| τ) (FISM's normalisation).

        Args:
            interaction (Interaction): ``USER_ID`` and ``ITEM_ID`` (a training like), LongTensors of shape [n];
                ``NEG_ITEM_ID`` for BPR, of shape [n] or [n, candidate_num].

        Returns:
            torch.Tensor: the loss, shape [].
        """
        users, positives = interaction[self.USER_ID], interaction[self.ITEM_ID]
        distinct, slot = torch.unique(users, return_inverse=True)
        scores, (column, owner) = self.class_scores(distinct)
        positive = torch.searchsorted(self.training_items, positives)
        if loss == "softmax":
            likes = (self.R.indptr[distinct + 1] - self.R.indptr[distinct]).clamp(min=1).to(scores.dtype)
            return class_softmax_loss(scores.mul_(1 / (likes * temperature)), positive, slot)
        candidates = torch.searchsorted(self.training_items, interaction[self.NEG_ITEM_ID].view(len(positives), -1))
        best = scores.detach()[candidates, slot[:, None]].argmax(1, keepdim=True)  # the first best, as argmax
        negative = candidates.gather(1, best).squeeze(1)
        return self.bpr_loss(interaction, scores[positive, slot] - scores[negative, slot])

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
        """A function of an evaluation batch's interaction giving its (users x candidates) scores, with the estimation
        constraint; the candidates' rows (and their V f_i) prepared once here.

        Args:
            candidates: the items scored, a LongTensor of shape [n_candidates].

        Returns:
            callable: interaction (``USER_ID``, a LongTensor of shape [n_users]) -> scores [n_users, n_candidates].
        """
        order = torch.argsort(candidates)  # the constraint finds likes by binary search in sorted items
        items = candidates.index_select(0, order)
        content_items, item_factors = self.item_inputs(self.F.rows_matrix(items))
        column_of_sorted = order

        def score(interaction):
            users = interaction[self.USER_ID]
            with torch.no_grad():  # the profiles' dense block no larger than the batch's scores
                scores = self.scores_in_blocks(users, content_items, item_factors, len(users) * len(items))
                scores, _ = self.without_own_features(scores, users, items, item_factors)
            result = torch.empty(len(users), len(candidates), dtype=scores.dtype, device=scores.device)
            result[:, column_of_sorted] = scores.T
            return result

        return score

    def item_inputs(self, item_matrix):
        """(content rows as a ``ConstantSparse``, V f_i or None) of items' feature rows (torch sparse CSR)."""
        items = ConstantSparse(item_matrix)
        factors = self.low_rank_factors()
        item_factors = None if factors is None else items @ factors.detach()
        return items.columns_below(self.n_content), item_factors

    def score_feature_rows(self, users, item_matrix):
        """(len(users) x n_items) scores f_i^T W_u f_u against the rows of ``item_matrix`` (items x features,
        torch sparse CSR: candidates, or new items weighted like ``F``), without the estimation constraint, in
        blocks of users of ``SCORE_BLOCK_CELLS`` cells: evaluation's scorer, for serving."""
        content_items, item_factors = self.item_inputs(item_matrix)
        with torch.no_grad():
            return self.scores_in_blocks(users, content_items, item_factors, SCORE_BLOCK_CELLS).T.contiguous()

    def scores_in_blocks(self, users, content_items, item_factors, cells):
        """``item_user_scores`` (n_items x len(users)) in blocks of users whose dense profiles and scores hold at most
        ``cells`` cells each."""
        step = max(1, cells // max(content_items.shape[0], content_items.shape[1], 1))
        if step >= len(users):
            return self.item_user_scores(users, content_items, item_factors)
        blocks = [
            self.item_user_scores(users[start : start + step], content_items, item_factors)
            for start in range(0, len(users), step)
        ]
        return torch.cat(blocks, dim=1)

    def weighted_profiles_t(self, users, gathered=None, columns=None):
        """(n_features x len(users)) dense block of c_u * f_u, one column per user, built from F_U's
        nonzeros (``gathered``: ``F_U.gather_rows(users)``; each (user, feature) cell is written once)."""
        owner, cols, values, _ = self.F_U.gather_rows(users) if gathered is None else gathered
        if columns is not None:  # the first ``columns`` features only
            kept = cols < columns
            owner, cols, values = owner[kept], cols[kept], values[kept]
        weights = self.diagonal_weights(users)
        if weights.dim() == 1:
            weights = weights.index_select(0, cols)
        else:
            weights = weights.reshape(-1).index_select(0, owner * self.n_features + cols)
        n_rows = self.n_features if columns is None else columns
        block = torch.zeros(n_rows * len(users), dtype=values.dtype, device=values.device)
        block.index_copy_(0, cols * len(users) + owner, values * weights)
        return block.view(n_rows, len(users))
