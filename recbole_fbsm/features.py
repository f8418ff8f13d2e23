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
    names: list            # "field:token" (sparse fields) or "field:k" (dense fields) for each column
    # How ``matrix`` was made from term counts, so that rows of items never seen (cold items served
    # after training) can be weighted identically: per-column weight (idf for tfidf, 1 otherwise), the
    # weighting, the field of each column, which fields are dense, and the normalisation.
    column_weights: np.ndarray = None
    weighting: str = "tfidf"
    normalize: bool = True
    column_field: np.ndarray = None    # index into ``fields`` for each column
    fields: tuple = ()
    dense_fields: tuple = ()           # float_seq fields: values used as they are (no idf, no binarising)
    field_scales: np.ndarray = None    # per field, with per-field normalisation (``field_weights``); None: joint
    source_columns: np.ndarray = None  # column of each feature in ``term_counts`` (training vocabulary only)

    @property
    def n_features(self):
        return self.matrix.shape[1]

    def transform(self, counts):
        """Weight raw term counts (rows x n_features, the columns of ``names``) exactly as ``matrix``
        was weighted: same idf (learned on training items), binarised for ``binary``, then normalised
        (L2 rows, or each field's block L2-normalised and scaled). ``transform(counts of the dataset's
        items in these columns) == matrix``."""
        if self.column_weights is None:
            raise ValueError("ItemFeatures.transform needs column_weights (build_item_features sets them).")
        counts = sp.csr_matrix(counts, dtype=np.float64)
        if counts.shape[1] != len(self.column_weights):
            raise ValueError(f"transform: expected {len(self.column_weights)} columns, got {counts.shape[1]}.")
        if self.weighting == "binary":
            dense = self._dense_columns()
            binary = (counts != 0).astype(np.float64)
            counts = binary if not dense.any() else sp.csr_matrix(
                binary @ sp.diags((~dense).astype(np.float64)) + counts @ sp.diags(dense.astype(np.float64)))
        weighted = sp.csr_matrix(counts @ sp.diags(self.column_weights))
        weighted.eliminate_zeros()
        if self.normalize:
            weighted = self._normalise(weighted)
        weighted = sp.csr_matrix(weighted)
        weighted.eliminate_zeros()
        weighted.sort_indices()
        return weighted

    def _dense_columns(self):
        dense = np.array([field in self.dense_fields for field in self.fields], dtype=bool)
        return dense[self.column_field] if len(dense) else np.zeros(len(self.column_weights), dtype=bool)

    def _normalise(self, weighted):
        """Joint L2 rows (``field_scales`` None), or per field: each field's block of a row L2-normalised
        and scaled by sqrt(w_f / sum w), so that the cosine of two items is the w-weighted mean of their
        per-field cosines."""
        if self.field_scales is None:
            return l2_normalize(weighted, norm="l2", axis=1)
        n_fields = len(self.fields)
        membership = sp.csr_matrix(
            (np.ones(len(self.column_field)), (np.arange(len(self.column_field)), self.column_field)),
            shape=(len(self.column_field), n_fields))
        norms = np.sqrt(np.asarray((weighted.multiply(weighted) @ membership).todense()))  # rows x fields
        factors = np.divide(self.field_scales[None, :], norms, out=np.zeros_like(norms), where=norms > 0)
        coo = weighted.tocoo()
        values = coo.data * factors[coo.row, self.column_field[coo.col]]
        return sp.csr_matrix((values, (coo.row, coo.col)), shape=weighted.shape)


def feature_fields(dataset, fields=None):
    """The configured feature fields, or every token/token_seq field of the .item file but item_id.
    Dense ``float_seq`` fields (e.g. text embeddings, an LSA of the text) are used when named."""
    loaded = dataset.item_feat is not None
    available = [
        f for f in dataset.fields(ftype=[FeatureType.TOKEN, FeatureType.TOKEN_SEQ])
        if f != dataset.iid_field and loaded and f in dataset.item_feat
    ]
    dense = [f for f in dataset.fields(ftype=[FeatureType.FLOAT_SEQ]) if loaded and f in dataset.item_feat]
    if not fields:
        if not available:
            raise ColdStartError(
                f"dataset {dataset.dataset_name!r}: no item token/token_seq field is loaded; "
                "list the item features in feature_fields and load_col.item."
            )
        return available
    missing = [f for f in fields if f not in available + dense]
    if missing:
        raise ColdStartError(
            f"feature_fields {missing} are not item token/token_seq/float_seq fields of dataset "
            f"{dataset.dataset_name!r}; loaded item fields are {available + dense}."
        )
    return list(fields)


def is_dense_field(dataset, field):
    return dataset.field2type[field] == FeatureType.FLOAT_SEQ


def term_counts(dataset, fields):
    """Sparse n_items x n_features term counts (dense fields: their values) and the feature names,
    straight from ``item_feat``, in RecBole's token order (every token of the .item file)."""
    blocks, names = [], []
    for field in fields:
        if is_dense_field(dataset, field):
            values = dataset.item_feat[field].numpy().astype(np.float64)
            values = values.reshape(values.shape[0], -1)
            blocks.append(sp.csr_matrix(values))
            names += [f"{field}:{k}" for k in range(values.shape[1])]
            continue
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


def field_scales(fields, field_weights):
    """sqrt(w_f / sum w) per field from ``field_weights`` ({field: weight}; fields not named weigh 1),
    or None (``field_weights`` unset: the fields' columns are normalised together)."""
    if field_weights is None:
        return None
    if not isinstance(field_weights, dict):
        raise ColdStartError(f"field_weights: expected a mapping {{field: weight}}; got {field_weights!r}.")
    unknown = [f for f in field_weights if f not in fields]
    if unknown:
        raise ColdStartError(f"field_weights names {unknown}, which are not among the feature fields {list(fields)}.")
    weights = []
    for field in fields:
        value = field_weights.get(field, 1.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ColdStartError(f"field_weights[{field!r}]: expected a number >= 0; got {value!r}.")
        weights.append(float(value))
    weights = np.asarray(weights)
    if weights.sum() <= 0:
        raise ColdStartError(f"field_weights: at least one field needs a positive weight; got {field_weights!r}.")
    return np.sqrt(weights / weights.sum())


def training_items(dataset):
    """Internal ids of the training split's items (``split_items``), or of the items with interactions when
    the dataset carries no split: what every statistic of the features is taken from."""
    items = getattr(dataset, "split_items", None)
    if items is None:
        items = np.unique(dataset.inter_feat[dataset.iid_field].numpy())
    return np.asarray(items, dtype=np.int64)


def build_item_features(dataset, training_items, fields=None, weighting="tfidf", normalize=True, field_weights=None):
    """Weighted (and optionally normalised) item feature matrix; everything from ``training_items``.

    The columns are the *training vocabulary*: tokens that occur in at least one training item, sorted
    by (field, token), plus every column of the dense fields. A token only validation/test items have
    gets no column (it could carry no learned weight), and the column order, hence the model's
    initial values, depends on nothing but the training items' features (not on other splits' text, nor
    on the file's row order).
    """
    if weighting not in WEIGHTINGS:
        raise ColdStartError(f"feature_weighting: expected one of {', '.join(WEIGHTINGS)}; got {weighting!r}.")
    fields = feature_fields(dataset, fields)
    counts, names = term_counts(dataset, fields)
    names = np.asarray(names, dtype=object)
    column_field = np.concatenate([
        np.full(_width(dataset, field), k) for k, field in enumerate(fields)]).astype(np.int64)
    dense_fields = tuple(f for f in fields if is_dense_field(dataset, f))
    dense = np.isin(column_field, [fields.index(f) for f in dense_fields])
    training = counts[np.asarray(training_items, dtype=np.int64)]
    seen = (np.asarray((training != 0).sum(axis=0)).ravel() > 0) | dense
    source_columns = np.flatnonzero(seen)
    source_columns = source_columns[np.lexsort((names[source_columns], column_field[source_columns]))]
    counts, training = counts[:, source_columns], training[:, source_columns]
    column_weights = np.ones(len(source_columns))
    if weighting == "tfidf":
        idf = TfidfTransformer(norm=None, smooth_idf=True).fit(training).idf_
        column_weights = np.where(dense[source_columns], 1.0, idf)
    features = ItemFeatures(
        None, list(names[source_columns]), column_weights, weighting, bool(normalize),
        column_field[source_columns], tuple(fields), dense_fields,
        field_scales(fields, field_weights), source_columns)
    features.matrix = features.transform(counts)
    return features


def _width(dataset, field):
    """Number of term_counts columns of ``field``."""
    if is_dense_field(dataset, field):
        values = dataset.item_feat[field]
        return int(values.numel() // max(values.shape[0], 1))
    return len(dataset.field2id_token[field]) - 1


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
