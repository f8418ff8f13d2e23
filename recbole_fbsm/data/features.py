"""The item x feature matrix F and the users' profiles F_U, built once with scipy.sparse.

F has one column per (field, token) of the configured ``token`` / ``token_seq`` fields of the .item file (a
repeated token is a term count), weighted binary, tf, tf-idf or BM25 with statistics of *training items only*
(nothing about validation/test items enters training; a token of no training item gets no column).

Rows are then L2-normalised, optionally with a shrink s: f_i = x_i sqrt(1 + s) / sqrt(||x_i||^2 + s m), m the
training rows' mean squared norm: f_i . f_j is then, up to 1 + s, the cosine damped for items with little text
(the row-scaled form of neighbourhood models' shrunk cosine), and a row of norm^2 m keeps unit length.
"""

import json
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
from recbole.utils import FeatureType
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfTransformer

from recbole_fbsm.config.schema import WEIGHTING_ALIASES
from recbole_fbsm.data.analyzer import analyzer_path
from recbole_fbsm.errors import ColdStartError


@dataclass
class ItemFeatures:
    matrix: sp.csr_matrix  # n_items x n_features (row 0 is RecBole's padding item, all zero)
    names: list  # "field:token" (sparse fields) or "field:k" (dense fields) for each column
    # How ``matrix`` was made from term counts, so that items never seen (served after training) are weighted alike
    column_weights: np.ndarray = None
    weighting: str = "tfidf"
    normalize: bool = True
    column_field: np.ndarray = None  # index into ``fields`` for each column
    fields: tuple = ()
    dense_fields: tuple = ()  # float_seq fields: values used as they are (no idf, no binarising)
    field_scales: np.ndarray = None  # per field, with per-field normalisation (``field_weights``); None: joint
    source_columns: np.ndarray = None  # column of each feature in ``term_counts`` (training vocabulary only)
    bm25_k1: float = None  # BM25's term-frequency saturation (weighting bm25 only)
    bm25_b: float = None  # BM25's length normalisation (0: none, 1: full)
    average_lengths: np.ndarray = None  # BM25: per field, the training items' mean length (summed counts)
    shrink: float = 0.0  # row shrink s (see the module docstring); 0: plain L2 rows
    mean_square_norms: np.ndarray = None  # per normalised block (one, or one per field), over training items
    # identity features (hybrid FBSM, ``with_identity``): the items that have an identity column, in the order of
    # the last columns of ``matrix`` (names "identity:TOKEN"), and that column's value; None: no identity columns
    identity_items: np.ndarray = None
    identity_weight: float = None

    @property
    def n_features(self):
        return self.matrix.shape[1]

    @property
    def n_identity(self):
        """Number of identity columns (the last columns of ``matrix``)."""
        return 0 if self.identity_items is None else len(self.identity_items)

    def transform(self, counts):
        """Raw term counts (rows x the columns of ``names``) weighted and normalised exactly as ``matrix`` was:
        ``transform(counts of the dataset's items in these columns) == matrix``."""
        counts = sp.csr_matrix(counts, dtype=np.float64)
        if self.weighting == "bm25":
            weighted = self._bm25_term_frequencies(counts)
        else:  # a matrix of transform's own, weighted in place
            weighted = counts.copy()
            weighted.sum_duplicates()
            if self.weighting == "binary":  # the sparse fields' counts become 1; dense fields' values stay
                weighted.data[~self._dense_columns()[weighted.indices] & (weighted.data != 0)] = 1.0
        del counts
        for _, entries in row_chunks(weighted.indptr):  # @ diag(column_weights), entry by entry
            weighted.data[entries] *= self.column_weights[weighted.indices[entries]]
        weighted.eliminate_zeros()
        if self.normalize:
            weighted = self._normalise(weighted)
        weighted = sp.csr_matrix(weighted)
        if self.n_identity:  # items weighted from their counts are new items: no identity, zero columns
            weighted = sp.csr_matrix(sp.hstack([weighted, sp.csr_matrix((weighted.shape[0], self.n_identity))]))
        weighted.eliminate_zeros()
        weighted.sort_indices()
        return weighted

    def _bm25_term_frequencies(self, counts):
        """tf (k1 + 1) / (tf + k1 (1 - b + b len / avglen)) on the sparse fields' columns, ``len`` the
        item's summed counts in that field, ``avglen`` the training items' mean (dense columns untouched)."""
        dense = self._dense_columns()
        lengths = self.field_lengths(counts)  # rows x fields
        saturated = sp.csr_matrix(
            (np.empty_like(counts.data), counts.indices.copy(), counts.indptr.copy()), shape=counts.shape
        )
        for rows, entries in row_chunks(counts.indptr):  # a block of rows at a time: temporaries of one block
            row_of_entry = rows_of_entries(counts.indptr, rows)
            columns = counts.indices[entries]
            field = self.column_field[columns]
            ratio = lengths[row_of_entry, field] / np.maximum(self.average_lengths[field], 1e-12)
            tf = counts.data[entries]
            values = tf * (self.bm25_k1 + 1) / (tf + self.bm25_k1 * (1 - self.bm25_b + self.bm25_b * ratio))
            saturated.data[entries] = np.where(dense[columns], tf, values)
        return saturated

    def field_lengths(self, counts):
        """Summed counts of each row in each field (rows x fields)."""
        return np.asarray((sp.csr_matrix(counts) @ self._membership()).todense())

    def _membership(self):
        return sp.csr_matrix(
            (np.ones(len(self.column_field)), (np.arange(len(self.column_field)), self.column_field)),
            shape=(len(self.column_field), len(self.fields)),
        )

    def _dense_columns(self):
        dense = np.array([field in self.dense_fields for field in self.fields], dtype=bool)
        return dense[self.column_field] if len(dense) else np.zeros(len(self.column_weights), dtype=bool)

    def square_norms(self, weighted):
        """Squared L2 norm of each row's normalised blocks: (rows x 1) jointly, (rows x fields) per field."""
        sums = np.zeros((weighted.shape[0], 1 if self.field_scales is None else len(self.fields)))
        by_field = None if self.field_scales is None else self._membership()
        for rows, entries in row_chunks(weighted.indptr):  # a block of rows at a time: no copy of the matrix
            data = weighted.data[entries]
            squares = sp.csr_matrix(
                (data * data, weighted.indices[entries], weighted.indptr[rows.start : rows.stop + 1] - entries.start),
                shape=(rows.stop - rows.start, weighted.shape[1]),
            )
            sums[rows] = squares.sum(axis=1) if by_field is None else (squares @ by_field).todense()
        return sums

    def _normalise(self, weighted):
        """Joint L2 rows (``field_scales`` None), or per field: each field's block of a row L2-normalised
        and scaled by sqrt(w_f / sum w), so that the cosine of two items is the w-weighted mean of their
        per-field cosines. With ``shrink`` s a block is multiplied by sqrt(1 + s) / sqrt(norm^2 + s m) instead
        of divided by its norm (m: the block's mean squared norm over training items)."""
        squares = self.square_norms(weighted)
        if self.shrink:
            squares = squares + self.shrink * self.mean_square_norms[None, :]
        norms = np.sqrt(squares)
        scales = np.ones(1) if self.field_scales is None else self.field_scales
        scales = scales * np.sqrt(1.0 + self.shrink)
        factors = np.divide(scales[None, :], norms, out=np.zeros_like(norms), where=norms > 0)
        for rows, entries in row_chunks(weighted.indptr):  # in place: ``weighted`` is transform's own copy
            row_of_entry = rows_of_entries(weighted.indptr, rows)
            block = 0 if self.field_scales is None else self.column_field[weighted.indices[entries]]
            weighted.data[entries] *= factors[row_of_entry, block]
        return weighted


def feature_fields(dataset, fields=None):
    """The configured feature fields, or every token/token_seq field of the .item file but item_id.
    Dense ``float_seq`` fields (e.g. text embeddings, an LSA of the text) are used when named."""
    loaded = dataset.item_feat is not None
    rows = getattr(dataset, "item_token_rows", None) or {}
    available = [
        f
        for f in dataset.fields(ftype=[FeatureType.TOKEN, FeatureType.TOKEN_SEQ])
        if f != dataset.iid_field and loaded and (f in dataset.item_feat or f in rows)
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
        indptr, indices = item_token_rows(dataset, field)
        vocabulary = dataset.field2id_token[field]
        # [PAD] (id 0) is not among the indices: column k holds token k + 1 (no copy for dropping column 0)
        block = sp.csr_matrix(
            (np.ones(len(indices), dtype=np.float64), indices - 1, indptr), shape=(len(indptr) - 1, len(vocabulary) - 1)
        )
        block.sum_duplicates()  # sorts the new indices in place
        blocks.append(block)
        names += [f"{field}:{token}" for token in vocabulary[1:]]
    counts = blocks[0] if len(blocks) == 1 else sp.hstack(blocks, format="csr")
    if counts.shape[0] != dataset.item_num:
        raise ColdStartError(f"item features have {counts.shape[0]} rows for {dataset.item_num} items.")
    return counts, names


def row_chunks(indptr, entries_per_chunk=1 << 22):
    """(rows, entries) slices cutting a CSR matrix into blocks of whole rows of about ``entries_per_chunk``
    entries: elementwise work on a large matrix then needs temporaries of one block, not of the matrix."""
    n_rows = len(indptr) - 1
    cuts = np.searchsorted(indptr, np.arange(entries_per_chunk, indptr[-1], entries_per_chunk), side="left")
    starts = np.unique(np.concatenate(([0], np.minimum(cuts, n_rows), [n_rows])))
    bounds = zip(starts[:-1].tolist(), starts[1:].tolist())
    return [(slice(a, b), slice(int(indptr[a]), int(indptr[b]))) for a, b in bounds]


def rows_of_entries(indptr, rows):
    """The row of each entry of the block ``rows`` (a slice) of a CSR matrix."""
    return np.repeat(np.arange(rows.start, rows.stop), np.diff(indptr[rows.start : rows.stop + 1]))


def select_columns(matrix, columns):
    """``matrix[:, columns]`` for distinct ``columns``, by renumbering the kept entries' columns (scipy's column
    indexing builds its result through temporaries several times the matrix's size); indices sorted."""
    index_type = np.int32 if len(columns) < 2**31 else np.int64
    position = np.full(matrix.shape[1], -1, dtype=index_type)
    position[columns] = np.arange(len(columns), dtype=index_type)
    new_columns = position[matrix.indices]
    dropped = np.flatnonzero(new_columns < 0)  # usually few: tokens of no training item
    indptr = matrix.indptr - np.searchsorted(dropped, matrix.indptr)  # dropped entries before each row's start
    if len(dropped):
        kept = new_columns >= 0
        data, new_columns = matrix.data[kept], new_columns[kept]
    else:
        data = matrix.data.copy()
    selected = sp.csr_matrix((data, new_columns, indptr), shape=(matrix.shape[0], len(columns)))
    selected.sort_indices()
    return selected


def item_token_rows(dataset, field):
    """(indptr, indices): the token ids of ``field`` item by item, [PAD] (0) left out, in a CSR layout. From
    ``item_token_rows`` where the dataset keeps them there (``ColdStartDataset``, models that read their own
    features), else from ``item_feat``'s column (one id per item, or RecBole's padded rows)."""
    rows = (getattr(dataset, "item_token_rows", None) or {}).get(field)
    if rows is not None:
        return rows
    tokens = dataset.item_feat[field].numpy()
    if tokens.ndim == 1:
        tokens = tokens[:, None]
    kept = tokens > 0
    indptr = np.zeros(tokens.shape[0] + 1, dtype=np.int64)
    np.cumsum(kept.sum(axis=1), out=indptr[1:])
    return indptr, tokens[kept]


def field_scales(fields, field_weights):
    """sqrt(w_f / sum w) per field from ``field_weights`` ({field: weight >= 0}, checked by the schema; fields not
    named weigh 1), or None (``field_weights`` unset: the fields' columns are normalised together)."""
    if field_weights is None:
        return None
    unknown = [f for f in field_weights if f not in fields]
    if unknown:
        raise ColdStartError(f"field_weights names {unknown}, which are not among the feature fields {list(fields)}.")
    weights = np.array([float(field_weights.get(field, 1.0)) for field in fields])
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


def features_from_config(dataset, training_items, config, normalize):
    """``build_item_features`` with the run's settings (``feature_fields``, ``feature_weighting``,
    ``bm25_k1``, ``bm25_b``, ``feature_shrink``, ``field_weights``): one place that reads them, for every
    model and for serving."""
    return build_item_features(
        dataset,
        training_items,
        fields=config["feature_fields"],
        weighting=config["feature_weighting"],
        normalize=normalize,
        field_weights=config["field_weights"],
        bm25_k1=config["bm25_k1"],
        bm25_b=config["bm25_b"],
        shrink=config["feature_shrink"],
        stop_words=stop_words_of(config, dataset),
    )


def stop_words_of(config, dataset):
    """{field: lower-cased words dropped} for the token_seq fields that no stored analyzer describes
    (``stop_words``; a converted field's analyzer dropped its own before stemming)."""
    words = config["stop_words"]
    if not words:
        return {}
    words = frozenset(ENGLISH_STOP_WORDS if words == "english" else (w.lower() for w in words))
    path = analyzer_path(config["data_path"], config["dataset"])
    analysed = set(json.loads(path.read_text(encoding="utf-8")).get("fields", {})) if path.is_file() else set()
    fields = feature_fields(dataset, config["feature_fields"])
    return {f: words for f in fields if f not in analysed and dataset.field2type.get(f) == FeatureType.TOKEN_SEQ}


# longer than 60 lines: a docstring with the weightings' formulas, then one pass: counts, training vocabulary, weights
def build_item_features(
    dataset,
    training_items,
    fields=None,
    weighting="tfidf",
    normalize=True,
    field_weights=None,
    bm25_k1=None,
    bm25_b=None,
    shrink=0.0,
    stop_words=None,
):
    """Weighted (and optionally normalised) item feature matrix; every statistic from ``training_items``; the tokens
    of ``stop_words`` ({field: words}) are no features.

    BM25 (the weighting of Ferrari Dacrema et al.'s ItemKNNCBF) weighs a term count tf of an item of length len by
    tf (k1 + 1) / (tf + k1 (1 - b + b len / avglen)) x Lucene's idf log(1 + (N - df + 0.5) / (df + 0.5)).

    The columns are the *training vocabulary* sorted by (field, token), plus the dense fields' columns: the
    column order, hence the model's initial values, depends on the training items' features alone.
    """
    fields = feature_fields(dataset, fields)
    counts, names = term_counts(dataset, fields)
    names = np.asarray(names, dtype=object)
    column_field = np.concatenate([np.full(_width(dataset, field), k) for k, field in enumerate(fields)]).astype(
        np.int64
    )
    dense_fields = tuple(f for f in fields if is_dense_field(dataset, f))
    dense = np.isin(column_field, [fields.index(f) for f in dense_fields])
    training = counts[np.asarray(training_items, dtype=np.int64)]
    seen = (np.bincount(training.indices[training.data != 0], minlength=counts.shape[1]) > 0) | dense
    for k, field in enumerate(fields):
        if (stop_words or {}).get(field):
            tokens = np.char.partition(np.char.lower(names[column_field == k].astype(str)), ":")[:, 2]
            seen[column_field == k] &= ~np.isin(tokens, sorted(stop_words[field]))
    source_columns = np.flatnonzero(seen)
    source_columns = source_columns[np.lexsort((names[source_columns], column_field[source_columns]))]
    counts = select_columns(counts, source_columns)  # one at a time: each old matrix freed before the next
    training = select_columns(training, source_columns)
    weighting = WEIGHTING_ALIASES.get(weighting, weighting)
    column_weights = np.ones(len(source_columns))
    if weighting == "tfidf":
        idf = TfidfTransformer(norm=None, smooth_idf=True).fit(training).idf_
        column_weights = np.where(dense[source_columns], 1.0, idf)
    if weighting == "bm25":
        document_frequency = np.asarray((training != 0).sum(axis=0)).ravel()
        n = training.shape[0]
        idf = np.log1p((n - document_frequency + 0.5) / (document_frequency + 0.5))
        column_weights = np.where(dense[source_columns], 1.0, idf)
    features = ItemFeatures(
        None,
        list(names[source_columns]),
        column_weights,
        weighting,
        bool(normalize),
        column_field[source_columns],
        tuple(fields),
        dense_fields,
        field_scales(fields, field_weights),
        source_columns,
        None if bm25_k1 is None else float(bm25_k1),  # None: another weighting, which needs none
        None if bm25_b is None else float(bm25_b),
        shrink=float(shrink or 0.0),
    )
    if weighting == "bm25":
        features.average_lengths = features.field_lengths(training).mean(axis=0) if n else np.ones(len(fields))
    if features.shrink:
        unscaled = replace(features, normalize=False).transform(training)
        squares = features.square_norms(unscaled)
        features.mean_square_norms = np.array(
            [column[column > 0].mean() if (column > 0).any() else 1.0 for column in squares.T]
        )
    features.matrix = features.transform(counts)
    return features


def with_identity(features, items, tokens, weight):
    """``features`` with one identity column per item of ``items`` (internal ids; their external ``tokens``
    name the columns "identity:TOKEN"), valued ``weight`` beside the item's normalised content row: FBSM's
    V then learns an item-to-item (FISM) term between those items. Only items with training likes get one:
    a cold item has no identity, and ``transform`` gives any item weighted from its text none either."""
    items = np.asarray(items, dtype=np.int64)
    n_items = features.matrix.shape[0]
    identity = sp.csr_matrix(
        (np.full(len(items), float(weight)), (items, np.arange(len(items)))), shape=(n_items, len(items))
    )
    matrix = sp.csr_matrix(sp.hstack([features.matrix, identity]))
    matrix.sort_indices()
    names = list(features.names) + [f"identity:{token}" for token in tokens]
    return replace(features, matrix=matrix, names=names, identity_items=items, identity_weight=float(weight))


def _width(dataset, field):
    """Number of term_counts columns of ``field``."""
    if is_dense_field(dataset, field):
        values = dataset.item_feat[field]
        return int(values.numel() // max(values.shape[0], 1))
    return len(dataset.field2id_token[field]) - 1


def like_matrix(dataset):
    """Binary n_users x n_items matrix of the dataset's interactions (likes), duplicates merged. Its ones are
    float32 (exact; products with float64 features are float64 all the same): 4 bytes less per like."""
    users = dataset.inter_feat[dataset.uid_field].numpy()
    items = dataset.inter_feat[dataset.iid_field].numpy()
    matrix = sp.csr_matrix(
        (np.ones(len(users), dtype=np.float32), (users, items)), shape=(dataset.user_num, dataset.item_num)
    )
    matrix.data[:] = 1.0
    matrix.sort_indices()
    return matrix
