"""ItemKNNCBF: the content-based item neighbourhood of Ferrari Dacrema et al.'s evaluation framework
("A Troubling Analysis of Reproducibility and Progress in Recommender Systems Research", TOIS 2021),
the strongest simple content baseline to set a learned similarity against.

    score(u, i) = sum over u's training likes j != i of sim_k(i, j)

where sim_k(i, j) is sim(i, j)^p when j is among the k training items most similar to i, else 0.
Neighbours are training items only: a validation or test item is never a neighbour, and never a
source of the feature statistics (idf, BM25's average length come from training items).

sim(i, j) on the weighted features x (``feature_weighting``; rows not normalised):

- ``cosine``:     x_i . x_j / (||x_i|| ||x_j|| + shrink)
- ``asymmetric``: x_i . x_j / (||x_i||^(2a) ||x_j||^(2(1 - a)) + shrink), a = ``asymmetric_alpha``
- ``jaccard``:    |A ∩ B| / (|A| + |B| - |A ∩ B| + shrink) on the binary features A of i and B of j
- ``tversky``:    |A ∩ B| / (|A ∩ B| + a |A \\ B| + b |B \\ A| + shrink), a, b = ``tversky_alpha``, ``tversky_beta``
- ``dot``:        x_i . x_j on rows normalised as FBSM's are (L2, or shrunk by ``feature_shrink``):
                  the untrained FBSM's similarity, for a neighbourhood on the same features.

Nothing is learned; the model is built from the pipeline's fitted inputs (``models.inputs``), so that a run
writes an artifact the service rebuilds it from. Similarities are computed in dense blocks of candidates x
training items. The defaults (``dot``, every training item a neighbour, p = 1) are linear in the user's likes,

    score(u, i) = x_i . (sum of u's liked x_j) - [i liked by u] x_i . x_i,

and scored as two sparse products per batch (``linear``; citeulike-t's test evaluation: 12.5 s became 0.2 s).
"""

import numpy as np
import scipy.sparse as sp
import torch
from recbole.model.abstract_recommender import GeneralRecommender
from recbole.utils import InputType, ModelType

from recbole_fbsm.kernels.sparse import TorchCsr
from recbole_fbsm.models.contract import CandidateScoring, NothingToTrain
from recbole_fbsm.models.inputs import model_inputs

# candidates x training items cells of one dense similarity block (16 MiB of float32)
BLOCK_CELLS = 1 << 22


class ItemKNNCBF(NothingToTrain, CandidateScoring, GeneralRecommender):
    """Args (settings): ``similarity``, ``shrink``, ``knn`` (~: every training item), ``similarity_exponent``
    (p), ``asymmetric_alpha``, ``tversky_alpha``, ``tversky_beta``, and the feature settings
    (``feature_weighting``, ``bm25_k1``, ``bm25_b``, ``feature_shrink`` for ``dot``)."""

    type = ModelType.TRADITIONAL
    input_type = InputType.PAIRWISE
    reads_own_features = True  # the pipeline skips RecBole's per-batch feature join

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        self.similarity = str(config["similarity"]).lower()  # one of schema.SIMILARITIES (the settings check it)
        self.shrink = float(config["shrink"])
        self.knn = None if config["knn"] is None else int(config["knn"])
        self.exponent = float(config["similarity_exponent"])
        self.asymmetric_alpha = float(config["asymmetric_alpha"])
        self.tversky_alpha, self.tversky_beta = float(config["tversky_alpha"]), float(config["tversky_beta"])
        inputs = model_inputs(config, dataset, model_class=type(self))
        features = inputs.features
        self.feature_names = features.names
        self.n_features = features.n_features
        self.X = self.weighted_rows(features.matrix)  # items x features
        self.square_norms = squared_norms(self.X)
        self.neighbours = np.asarray(inputs.training_items, dtype=np.int64)  # the only items j ever used
        self.X_neighbours_T = sp.csr_matrix(self.X[self.neighbours].T)  # features x training items
        self.neighbour_index = np.full(self.n_items, -1, dtype=np.int64)
        self.neighbour_index[self.neighbours] = np.arange(len(self.neighbours))
        likes = sp.csr_matrix(inputs.likes)[:, self.neighbours]  # users x training items
        self.likes = TorchCsr(likes)

    @classmethod
    def uses_warm_backbone(cls, config):
        """Built from the fitted inputs (``models.contract.BuiltFromFittedInputs``), without a warm backbone."""
        return False

    @classmethod
    def feature_normalization(cls, config):
        """Rows normalised as FBSM's for ``dot`` only: the other similarities divide by the rows' own norms."""
        return str(config["similarity"]).lower() == "dot"

    @property
    def linear(self):
        """Whether sim_k(i, j) = x_i . x_j for every training item j (``dot``, every training item a neighbour,
        p = 1): the scores are then x_i . f_u, f_u the sum of the user's liked x_j (see the module docstring)."""
        return (
            self.similarity == "dot" and self.exponent == 1 and (self.knn is None or self.knn >= len(self.neighbours))
        )

    # --------------------------------------------------------------------------------- similarities
    def weighted_rows(self, matrix):
        """Feature rows (weighted like the dataset's: ``ItemFeatures.transform``) as the similarities read them:
        float64, and binary for ``jaccard`` and ``tversky``."""
        matrix = sp.csr_matrix(matrix, dtype=np.float64)
        if self.similarity in ("jaccard", "tversky"):
            matrix = (matrix != 0).astype(np.float64)
        return matrix

    def similarities(self, dot, own, other):
        """sim(i, j)^p from the dot products x_i . x_j (dense, rows i x columns j), the rows' squared norms
        ``own`` (column vector) and the columns' ``other`` (row vector)."""
        if self.similarity == "dot":
            block = dot
        elif self.similarity == "cosine":
            block = dot / _positive(np.sqrt(own) * np.sqrt(other) + self.shrink)
        elif self.similarity == "asymmetric":
            a = self.asymmetric_alpha
            block = dot / _positive(own**a * other ** (1 - a) + self.shrink)
        elif self.similarity == "jaccard":
            block = dot / _positive(own + other - dot + self.shrink)
        else:  # tversky; on binary rows the squared norm is the number of tokens
            block = dot / _positive(
                dot + self.tversky_alpha * (own - dot) + self.tversky_beta * (other - dot) + self.shrink
            )
        return np.power(block, self.exponent) if self.exponent != 1 else block

    def row_similarities(self, rows, others):
        """sim(i, j)^p (dense, len(rows) x len(others)) of feature rows against other rows (scipy, weighted like
        the dataset's), no neighbour kept or dropped: what the service reads for liked items outside training."""
        rows, others = self.weighted_rows(rows), self.weighted_rows(others)
        dot = (rows @ others.T).toarray()
        return self.similarities(dot, squared_norms(rows)[:, None], squared_norms(others)[None, :])

    def neighbour_similarities(self, rows, columns=None):
        """sim_k(i, j) of feature rows (weighted like the dataset's) against every training item j, as a dense
        (len(rows) x n_training_items) float64 array: zero where j is the row's own item (``columns``: each row's
        training column, -1 for none) and, with ``knn``, outside each row's k largest."""
        rows = self.weighted_rows(rows)
        dot = (rows @ self.X_neighbours_T).toarray()
        block = self.similarities(dot, squared_norms(rows)[:, None], self.square_norms[self.neighbours][None, :])
        if columns is not None:
            is_training = columns >= 0
            block[np.flatnonzero(is_training), columns[is_training]] = 0.0
        if self.knn is not None and self.knn < block.shape[1]:
            drop = np.argpartition(-block, self.knn, axis=1)[:, self.knn :]
            np.put_along_axis(block, drop, 0.0, axis=1)
        return block

    def similarity_block(self, items):
        """sim_k(i, j) for ``items`` (numpy ids) against every training item j, as a dense
        (len(items) x n_training_items) float64 array: zero for j = i (the estimation constraint) and,
        with ``knn``, outside each row's k largest."""
        return self.neighbour_similarities(self.X[items], self.neighbour_index[items])

    def _blocks(self, rows, columns=None):
        """(start, end, ``neighbour_similarities``) over feature rows in blocks of at most ``BLOCK_CELLS`` cells."""
        step = max(1, BLOCK_CELLS // max(len(self.neighbours), 1))
        for start in range(0, rows.shape[0], step):
            end = min(start + step, rows.shape[0])
            own = None if columns is None else columns[start:end]
            yield start, end, self.neighbour_similarities(rows[start:end], own)

    # ---------------------------------------------------------------------------------------- scores
    def candidate_scorer(self, candidates):
        """A function of an evaluation batch's interaction giving its (users x candidates) scores: the users'
        training likes times each block of similarities. Prepared once per evaluation (the trainer holds the
        function): the candidates' rows (``linear``), or with ``knn`` their kept neighbours; without ``knn`` the
        dense blocks are computed again per batch (all at once would be candidates x training items).

        Args:
            candidates: the items scored, a LongTensor of shape [n_candidates].

        Returns:
            callable: interaction (``USER_ID``, a LongTensor of shape [n_users]) -> scores [n_users, n_candidates].
        """
        items = candidates.cpu().numpy()
        if self.linear:
            position = np.full(self.n_items, -1, dtype=np.int64)
            position[items] = np.arange(len(items))
            rows = sp.csr_matrix(self.X[items])
            return lambda interaction: self._linear_scores(interaction[self.USER_ID], rows, position)
        rows, columns = self.X[items], self.neighbour_index[items]
        kept = None
        if self.knn is not None:  # k neighbours kept per candidate: sparse, prepared once
            kept = [(start, end, sp.csr_matrix(block)) for start, end, block in self._blocks(rows, columns)]

        def score(interaction):
            users = interaction[self.USER_ID]
            likes = self.likes.rows_matrix(users).to(torch.float64)  # B x training items (sparse)
            scores = torch.zeros(len(users), len(items), dtype=torch.float64, device=users.device)
            for start, end, block in kept or self._blocks(rows, columns):
                dense = block.toarray() if sp.issparse(block) else block
                similar = torch.from_numpy(np.ascontiguousarray(dense.T)).to(users.device)  # training items x block
                scores[:, start:end] = torch.sparse.mm(likes, similar)
            return scores.to(torch.float32)

        return score

    def _linear_scores(self, users, rows, position):
        """(batch users x candidates) x_i . f_u, less x_i . x_i where the user liked candidate i (j != i); ``rows``:
        the candidates' x, ``position``: each item's candidate column (-1: none)."""
        likes = self.user_likes(users)
        owner, liked = likes.nonzero()
        profiles = (likes @ self.X[self.neighbours]).toarray()  # B x features: f_u
        scores = np.ascontiguousarray((rows @ profiles.T).T)  # B x candidates
        column = position[self.neighbours[liked]]  # the liked item's candidate column
        own = column >= 0
        np.subtract.at(scores, (owner[own], column[own]), self.square_norms[self.neighbours[liked[own]]])
        return torch.from_numpy(scores).to(device=users.device, dtype=torch.float32)

    def user_likes(self, users):
        """The users' training likes: a scipy (len(users) x training items) matrix of ones."""
        owner, liked, _, _ = self.likes.gather_rows(users)
        owner, liked = owner.cpu().numpy(), liked.cpu().numpy()
        return sp.csr_matrix((np.ones(len(owner)), (owner, liked)), shape=(len(users), len(self.neighbours)))

    def score_feature_rows(self, users, item_matrix):
        """(len(users) x rows) scores of items never seen in training from their feature rows (torch sparse CSR,
        weighted like the dataset's): each user's training likes times the rows' similarities to the training
        items, in blocks of at most ``BLOCK_CELLS`` cells."""
        rows = sp.csr_matrix(
            (
                item_matrix.values().cpu().double().numpy(),
                item_matrix.col_indices().cpu().numpy(),
                item_matrix.crow_indices().cpu().numpy(),
            ),
            shape=tuple(item_matrix.shape),
        )
        likes = self.user_likes(users)
        if self.linear:
            profiles = likes @ self.X[self.neighbours]  # users x features: f_u
            scores = (profiles @ self.weighted_rows(rows).T).toarray()
        else:
            scores = np.zeros((len(users), rows.shape[0]))
            for start, end, block in self._blocks(rows):
                scores[:, start:end] = likes @ block.T
        return torch.from_numpy(scores).to(device=users.device, dtype=torch.float32)

    def predict(self, interaction):
        """Scores of (user, item) pairs, through the distinct users' scores over the distinct items.

        Args:
            interaction (Interaction): ``USER_ID`` and ``ITEM_ID``, LongTensors of shape [n_pairs].

        Returns:
            torch.Tensor: the scores, shape [n_pairs].
        """
        users, items = interaction[self.USER_ID], interaction[self.ITEM_ID]
        unique_users, user_position = torch.unique(users, return_inverse=True)
        unique_items, item_position = torch.unique(items, return_inverse=True)
        scores = self.score_candidates({self.USER_ID: unique_users}, unique_items)
        return scores[user_position, item_position]


def squared_norms(matrix):
    """||x||^2 of every row of a scipy sparse matrix."""
    return np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel()


def _positive(denominator):
    """A denominator with zeros (an item without features) replaced by 1: its similarities are 0 anyway."""
    return np.where(denominator > 0, denominator, 1.0)
