"""The item x feature matrix F and the users' profiles F_U, built once with scipy.sparse.

F has one column per (field, token) of the configured ``token`` / ``token_seq`` fields of the .item
file; a token repeated in a cell counts as a term count. Weighting is binary, tf or tf-idf, with
document frequencies taken from *training items only*, so nothing about validation/test items enters
training. Tokens that occur in no training item get a zero column: they carry no learned weight.
"""

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from recbole.utils import FeatureType
from sklearn.feature_extraction.text import TfidfTransformer
from sklearn.preprocessing import normalize as l2_normalize

from recbole_fbsm.errors import ColdStartError

WEIGHTINGS = ("tfidf", "tf", "binary")


@dataclass
class ItemFeatures:
    matrix: sp.csr_matrix  # n_items x n_features (row 0 is RecBole's padding item, all zero)
    names: list            # "field:token" for each column
    # How ``matrix`` was made from term counts, so that rows of items never seen (cold items served
    # after training) can be weighted identically: per-column weight (idf x seen-in-training for
    # tfidf, the seen mask for tf and binary), the weighting and the L2 normalisation.
    column_weights: np.ndarray = None
    weighting: str = "tfidf"
    normalize: bool = True

    @property
    def n_features(self):
        return self.matrix.shape[1]

    def transform(self, counts):
        """Weight raw term counts (rows x n_features, the columns of ``names``) exactly as ``matrix``
        was weighted: same idf (learned on training items), zero weight for tokens no training item
        has, then L2 rows if ``normalize``. ``transform(term counts of the dataset) == matrix``."""
        if self.column_weights is None:
            raise ValueError("ItemFeatures.transform needs column_weights (build_item_features sets them).")
        counts = sp.csr_matrix(counts, dtype=np.float64)
        if counts.shape[1] != len(self.column_weights):
            raise ValueError(f"transform: expected {len(self.column_weights)} columns, got {counts.shape[1]}.")
        if self.weighting == "binary":
            counts = (counts > 0).astype(np.float64)
        weighted = sp.csr_matrix(counts @ sp.diags(self.column_weights))
        weighted.eliminate_zeros()
        if self.normalize:
            weighted = l2_normalize(weighted, norm="l2", axis=1)
        weighted = sp.csr_matrix(weighted)
        weighted.sort_indices()
        return weighted


def feature_fields(dataset, fields=None):
    """The configured feature fields, or every token/token_seq field of the .item file but item_id."""
    available = [
        f for f in dataset.fields(ftype=[FeatureType.TOKEN, FeatureType.TOKEN_SEQ])
        if f != dataset.iid_field and dataset.item_feat is not None and f in dataset.item_feat
    ]
    if not fields:
        if not available:
            raise ColdStartError(
                f"dataset {dataset.dataset_name!r}: no item token/token_seq field is loaded; "
                "list the item features in feature_fields and load_col.item."
            )
        return available
    missing = [f for f in fields if f not in available]
    if missing:
        raise ColdStartError(
            f"feature_fields {missing} are not item token/token_seq fields of dataset "
            f"{dataset.dataset_name!r}; loaded item fields are {available}."
        )
    return list(fields)


def term_counts(dataset, fields):
    """Sparse n_items x n_features term counts and the feature names, straight from ``item_feat``."""
    blocks, names = [], []
    for field in fields:
        tokens = dataset.item_feat[field].numpy()
        if tokens.ndim == 1:
            tokens = tokens[:, None]
        vocabulary = dataset.field2id_token[field]
        rows = np.repeat(np.arange(tokens.shape[0]), tokens.shape[1])
        cols = tokens.ravel()
        keep = cols > 0  # 0 is RecBole's [PAD]
        block = sp.csr_matrix(
            (np.ones(keep.sum(), dtype=np.float64), (rows[keep], cols[keep])),
            shape=(tokens.shape[0], len(vocabulary)),
        )
        block.sum_duplicates()
        blocks.append(block[:, 1:])
        names += [f"{field}:{token}" for token in vocabulary[1:]]
    counts = sp.hstack(blocks, format="csr")
    if counts.shape[0] != dataset.item_num:
        raise ColdStartError(f"item features have {counts.shape[0]} rows for {dataset.item_num} items.")
    return counts, names


def build_item_features(dataset, training_items, fields=None, weighting="tfidf", normalize=True):
    """Weighted (and optionally L2-normalised) item feature matrix; statistics from ``training_items``."""
    if weighting not in WEIGHTINGS:
        raise ColdStartError(f"feature_weighting: expected one of {', '.join(WEIGHTINGS)}; got {weighting!r}.")
    counts, names = term_counts(dataset, feature_fields(dataset, fields))
    training = counts[np.asarray(training_items, dtype=np.int64)]
    seen = np.asarray((training > 0).sum(axis=0)).ravel() > 0
    column_weights = seen.astype(np.float64)
    if weighting == "binary":
        weighted = (counts > 0).astype(np.float64)
    elif weighting == "tf":
        weighted = counts
    else:
        transformer = TfidfTransformer(norm=None, smooth_idf=True).fit(training)
        weighted = transformer.transform(counts)
        column_weights = transformer.idf_ * column_weights
    weighted = sp.csr_matrix(weighted @ sp.diags(seen.astype(np.float64)))
    weighted.eliminate_zeros()
    if normalize:
        weighted = l2_normalize(weighted, norm="l2", axis=1)
    weighted.sort_indices()
    return ItemFeatures(sp.csr_matrix(weighted), names, column_weights, weighting, bool(normalize))


def like_matrix(dataset):
    """Binary n_users x n_items matrix of the dataset's interactions (likes), duplicates merged."""
    users = dataset.inter_feat[dataset.uid_field].numpy()
    items = dataset.inter_feat[dataset.iid_field].numpy()
    matrix = sp.csr_matrix(
        (np.ones(len(users)), (users, items)), shape=(dataset.user_num, dataset.item_num)
    )
    matrix.data[:] = 1.0
    matrix.sort_indices()
    return matrix
