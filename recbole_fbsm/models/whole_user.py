"""A training batch of whole users (``train_batch_by_user``), as the feature-similarity models' step uses it.

When a batch holds every training like of each of its users, each once, the users' profiles f_u are sums over
the batch's own positives. The loader builds the batch's ``data.user_batches.WholeUserBatch`` (what follows
from the batch alone) and hands it to dynamic negative sampling's scoring and to the loss.

``whole_user_bpr_difference`` is the loss's r_ui - r_uj for such a batch as one autograd node with a
hand-written backward (the chain of about forty small autograd nodes it replaces cost more per step than
the arithmetic; tests/training/test_fast_paths.py checks it against autograd on the plain formula):

    r_ui - r_uj = sum_e a_e c[k_e] + (v_i - v_j) . v_u - v_i . v_i

with, per nonzero e of f_i (sign +) and of f_j (sign -), a_e = ±f_e (f_u[col_e] - [e in f_i] f_e) and c the
diagonal weights shared by all users (FBSM's D; UFSM's per-user mixtures keep the general path); v_i = V f_i,
v_j = V f_j, and v_u = V f_u = sum of the user's v_i over the batch.
"""

import torch
from torch import nn

from recbole_fbsm.kernels.sparse import concat_rows, rows_times_table, table_gradient


class WholeUserTraining:
    """The training step on a batch of whole users (the loader's ``data.user_batches.WholeUserBatch``), mixed into
    ``FeatureSimilarityRecommender`` (which holds the math: ``pair_scores``, ``diagonal_weights``,
    ``low_rank_factors``, F). Dynamic negative sampling's candidates are scored here and the loss reuses the parts
    (``WholeUserBatch.keep_scored``)."""

    shared_diagonal = True  # c_u one vector for all users (FBSM, CoSim): the difference is one autograd node

    def whole_user_difference(self, batch, negatives):
        """r_ui - r_uj of ``bpr_difference`` with f_u the sum over the batch's own positives: an epoch is linear in
        the likes. With a shared diagonal one autograd node (``whole_user_bpr_difference``); UFSM's user mixtures
        score pairs with the batch's profile entries.

        Args:
            batch (WholeUserBatch): the batch's n triplets' users and positives.
            negatives: a LongTensor of shape [n].

        Returns:
            torch.Tensor: r_ui - r_uj, shape [n].
        """
        rows = concat_rows(batch.rows, self.F.gather_rows(negatives))
        if self.shared_diagonal:
            weights, factors = self.diagonal_weights(batch.users), self.low_rank_factors()
            return whole_user_bpr_difference(
                batch, rows, weights, factors, batch.scored_negatives(negatives, (weights, factors))
            )
        users, n = batch.triplet_users, len(negatives)
        self_in_profile = torch.arange(2 * n, device=users.device) < n
        owner, cols = rows[0], rows[1]
        entries = batch.profile_at(batch.cells(torch.cat([batch.slots, batch.slots]).index_select(0, owner), cols))
        scores = self.pair_scores(
            torch.cat([users, users]),
            torch.cat([batch.positives, negatives]),
            self_in_profile,
            item_rows=rows,
            user_entries=entries,
        )
        return scores[:n] - scores[n:]

    def score_training_candidates(self, batch, candidates, unliked=False):
        """``predict``'s scores of dynamic negative sampling's k candidates per triplet of a whole-user ``batch``,
        f_u from its dense profiles and V f_u from its positives' V f_i; a candidate is a like when it is among
        its user's positives (no search in R), unless the caller knows none is (``unliked``). The parts the loss
        needs again are kept with the batch (``WholeUserBatch.keep_scored``). Independent of the training mode.

        Args:
            batch (WholeUserBatch): the batch's n triplets.
            candidates: candidate c of triplet t at c * n + t, a LongTensor of shape [k n].
            unliked (bool): no candidate is a training like of its user.

        Returns:
            torch.Tensor: the scores, shape [k n].
        """
        n = len(batch.slots)
        repeats = len(candidates) // n
        cols, values, offsets, counts = batch.bags(candidates)
        weights, factors = self.diagonal_weights(batch.users), self.low_rank_factors()
        # per nonzero of a candidate: c_u * f_u at (the candidate's user slot, column) of the dense profiles
        profiles = batch.dense_profiles().view(batch.n_users, self.n_features) * weights
        slots = torch.repeat_interleave(batch.slots.repeat(repeats), counts, output_size=len(cols))
        diagonal = nn.functional.embedding_bag(
            batch.cells(slots, cols),
            profiles.view(-1, 1),
            offsets,
            mode="sum",
            per_sample_weights=values.to(profiles.dtype),
        ).view(-1)
        scores, item_factors, positive_factors, user_factors = diagonal, None, None, None
        if factors is not None:  # low-rank part: (V^T f_c) . (V^T f_u), V^T f_u the sum of the positives' V^T f_i
            item_factors = nn.functional.embedding_bag(
                cols, factors, offsets, mode="sum", per_sample_weights=values.to(factors.dtype)
            )
            positive_factors = rows_times_table(*batch.rows, factors)
            user_factors = torch.zeros(batch.n_users, factors.shape[1], dtype=factors.dtype, device=factors.device)
            user_factors = user_factors.index_add_(0, batch.slots, positive_factors)
            scores = scores + (item_factors.reshape(repeats, n, -1) * user_factors.index_select(0, batch.slots)).sum(
                -1
            ).view(-1)
        pair_users = None if unliked else batch.triplet_users.repeat(repeats)
        liked = None if unliked else batch.liked(pair_users, candidates)
        if liked is not None and bool(liked.any()):  # estimation constraint: a training like without its own f_i
            liked = torch.nonzero(liked).squeeze(1)
            scores = scores.index_add(
                0, liked, -self.self_similarity(pair_users.index_select(0, liked), candidates.index_select(0, liked))
            )
        else:  # the loss may reuse the parts (a like's score has the self-similarity taken off: not kept then)
            batch.keep_scored(
                candidates, scores, (diagonal, item_factors, positive_factors, user_factors), (weights, factors)
            )
        return scores


def whole_user_bpr_difference(batch, rows, weights, factors, scored=None):
    """r_ui - r_uj per triplet of a whole-user ``batch`` (see the module docstring).

    Args:
        batch (WholeUserBatch): the batch's n triplets' users and positives.
        rows: ``gather_rows`` of the positives then the negatives (2n rows).
        weights: the diagonal weights c, shape [n_features].
        factors: V^T, shape [n_features, h], or None.
        scored: ``WholeUserBatch.scored_negatives``, the parts that scoring the negatives as candidates computed
            with these parameters ((v_i, v_j, v_u) or None, the negatives' diagonal parts): the forward then
            takes them instead of computing them again (the same values up to rounding; the same backward).

    Returns:
        torch.Tensor: r_ui - r_uj, shape [n], differentiable in ``weights`` and ``factors``.
    """
    owner, cols, values, offsets = rows
    n = len(batch.slots)
    n_positive_entries = len(batch.rows[1])  # the positives' entries come first
    profile_entries = batch.profile_at(batch.cells(torch.cat([batch.slots, batch.slots]).index_select(0, owner), cols))
    values = values.to(weights.dtype)
    signed = values * profile_entries
    signed[:n_positive_entries] -= values[:n_positive_entries] * values[:n_positive_entries]
    signed[n_positive_entries:] *= -1
    triplet = owner.clone()
    triplet[n_positive_entries:] -= n
    if factors is None:
        factors = weights.new_zeros((0, 0))
    return _WholeUserBprDifference.apply(
        weights,
        factors,
        batch.slots,
        batch.n_users,
        rows,
        signed,
        triplet,
        None if scored is None else (*scored, n_positive_entries),
    )


class _WholeUserBprDifference(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weights, factors, slots, n_users, rows, signed, triplet, scored):
        owner, cols, values, offsets = rows
        n = len(slots)
        difference = torch.zeros(n, dtype=weights.dtype, device=weights.device)
        if scored is None:
            difference.index_add_(0, triplet, signed * weights.index_select(0, cols))
        else:  # the negatives' diagonal parts are the candidates': the positives' entries alone
            scored_factors, negative_diagonal, positive = scored
            difference.index_add_(0, triplet[:positive], signed[:positive] * weights.index_select(0, cols[:positive]))
            difference -= negative_diagonal
        ctx.low_rank = factors.numel() > 0
        ctx.n_weights, ctx.n_users = len(weights), n_users
        ctx.save_for_backward(cols, signed, triplet, slots)
        if ctx.low_rank:
            if scored is None or scored_factors is None:
                v = nn.functional.embedding_bag(
                    cols, factors, offsets, mode="sum", per_sample_weights=values.to(factors.dtype)
                )
                v_i, v_j = v[:n], v[n:]
                v_u = torch.zeros(n_users, v.shape[1], dtype=v.dtype, device=v.device).index_add_(0, slots, v_i)
                v_u = v_u.index_select(0, slots)
            else:
                v_i, v_j, v_u = scored_factors
            difference += ((v_i - v_j) * v_u).sum(1) - (v_i * v_i).sum(1)
            ctx.rows, ctx.n_table_rows = (owner, cols, values), factors.shape[0]
            ctx.factors_saved = (v_i, v_j, v_u)
        return difference

    @staticmethod
    def backward(ctx, grad):
        cols, signed, triplet, slots = ctx.saved_tensors
        grad_weights = grad_factors = None
        if ctx.needs_input_grad[0]:
            grad_weights = torch.zeros(ctx.n_weights, dtype=grad.dtype, device=grad.device)
            grad_weights = grad_weights.index_add_(0, cols, signed * grad.index_select(0, triplet))
        if ctx.low_rank and ctx.needs_input_grad[1]:
            v_i, v_j, v_u = ctx.factors_saved
            g = grad[:, None]
            # v_u sums the slot's v_i: each v_i also gets sum over its slot of g (v_i - v_j)
            through_profile = torch.zeros(ctx.n_users, v_i.shape[1], dtype=v_i.dtype, device=v_i.device)
            through_profile = through_profile.index_add_(0, slots, g * (v_i - v_j)).index_select(0, slots)
            grad_rows = torch.cat([g * (v_u - 2 * v_i) + through_profile, -g * v_u])
            owner, _, values = ctx.rows
            grad_factors = table_gradient(owner, cols, values.to(grad_rows.dtype), grad_rows, ctx.n_table_rows)
        return grad_weights, grad_factors, None, None, None, None, None, None
