"""ItemKNNCBF in the live service: a user's stored likes are neighbours at once, like their training likes
(docs/serve.md, "Likes that count at once"). A liked item outside training joins i's neighbours when it is at least
as similar to i as i's k-th nearest training item, and drops none: users without stored likes keep the model's
scores. The kept neighbours are computed once per model and once per catalogue change, so a request costs one
sparse product and one (candidates x likes outside training) similarity block.
"""

import numpy as np
import scipy.sparse as sp

BLOCK_CELLS = 1 << 22  # rows x training items cells of one dense similarity block (32 MiB of float64)


class NeighbourScorer:
    """The live scores of an ``ItemNeighbourhood`` model (ItemKNNCBF) over the training items and the new items."""

    def __init__(self, model, training_items):
        self.model = model
        self.n_training = len(model.neighbours)
        self.k = model.knn if model.knn is not None and model.knn < self.n_training else None
        self.warm = None
        if self.k is not None:
            self.warm = self._kept(model.X[training_items], model.neighbour_index[training_items])
        self._new = (None, None)  # (the catalogue's matrix, its kept neighbours) of the last catalogue scored

    def _kept(self, rows, columns=None):
        """(sim_k of ``rows`` against the training items as a sparse matrix, each row's k-th largest similarity:
        the least a liked item outside training needs to be one of its neighbours), in bounded blocks."""
        kept, floors = [sp.csr_matrix((0, self.n_training))], [np.zeros(0)]
        step = max(1, BLOCK_CELLS // max(self.n_training, 1))
        for start in range(0, rows.shape[0], step):
            part = None if columns is None else columns[start : start + step]
            block = self.model.neighbour_similarities(rows[start : start + step], part)
            floors.append(np.partition(block, -self.k, axis=1)[:, -self.k])
            kept.append(sp.csr_matrix(block))
        return sp.vstack(kept, format="csr"), np.concatenate(floors)

    def _new_kept(self, matrix):
        held, kept = self._new
        if held is not matrix:  # snapshots are immutable: a new catalogue is a new matrix object
            kept = self._kept(matrix)
            self._new = (matrix, kept)
        return kept

    def scores(self, kind, matrix, liked_training, liked_other_rows):
        """Scores (float32, one per row of ``matrix``) of the ``kind`` ("warm": the training items in the model's
        order, "new": the catalogue's matrix) block; ``liked_training``: the user's liked training items (internal
        ids, training likes and stored ones); ``liked_other_rows``: the feature rows of their other liked items."""
        model = self.model
        if matrix.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        if self.k is None:  # every item a neighbour: every like counts in full
            liked = sp.vstack([model.X[liked_training], sp.csr_matrix(liked_other_rows, dtype=np.float64)])
            if liked.shape[0] == 0:
                return np.zeros(matrix.shape[0], dtype=np.float32)
            similar = model.row_similarities(matrix, liked)
            if kind == "warm":  # j != i, as in the model (the rows are the training items in the model's order)
                similar[model.neighbour_index[liked_training], np.arange(len(liked_training))] = 0.0
            return similar.sum(axis=1).astype(np.float32)
        kept, floor = self.warm if kind == "warm" else self._new_kept(matrix)
        columns = model.neighbour_index[liked_training]
        scores = np.asarray(kept[:, columns[columns >= 0]].sum(axis=1)).ravel()
        if liked_other_rows.shape[0]:
            similar = model.row_similarities(matrix, liked_other_rows)
            scores = scores + np.where(similar >= floor[:, None], similar, 0.0).sum(axis=1)
        return scores.astype(np.float32)
