"""RecBole Dataset that can split by items (the paper's item cold-start protocol)."""

from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch
from recbole.data.dataset import Dataset
from recbole.data.interaction import Interaction
from recbole.utils import FeatureSource, FeatureType, ModelType

from recbole_fbsm.config.schema import setting
from recbole_fbsm.data.atomic_files import codes_of, read_header
from recbole_fbsm.data.fast_load import pad_sequences, read_feat_columns, sequence_rows, split_rows
from recbole_fbsm.data.token_ids import TokenIds
from recbole_fbsm.errors import ColdStartError

PHASES = ("train", "valid", "test")


def item_split(tokens, ratios, seed, setting_name="eval_args.split.RS"):
    """Split index (0 train, 1 valid, 2 test) of each external item token, a function of the set of tokens, the
    ratios and the seed only: sorted tokens shuffled by ``numpy.random.default_rng(seed)``; valid and test get
    round(ratio * n) items, train the rest."""
    tokens = np.asarray(tokens).astype(str)
    n_items = len(tokens)
    order = np.argsort(tokens, kind="stable")
    shuffled = order[np.random.default_rng(seed).permutation(n_items)]
    n_valid = int(round(ratios[1] / sum(ratios) * n_items))
    n_test = int(round(ratios[2] / sum(ratios) * n_items))
    sizes = (n_items - n_valid - n_test, n_valid, n_test)
    if min(sizes) < 1:
        raise ColdStartError(
            f"{n_items} items with interactions and {setting_name}={list(ratios)} give "
            f"train/valid/test sizes {sizes}; every split needs at least one item."
        )
    split = np.empty(n_items, dtype=np.int64)
    split[shuffled] = np.repeat(np.arange(3), sizes)
    return split


def per_user_split(users, ratios, seed):
    """Split index (0 train, 1 valid, 2 test) of each entry of ``users`` (one entry per distinct (user, item)
    pair, in a canonical order): each user's entries shuffled with ``numpy.random.default_rng(seed)`` and cut
    with RecBole's per-user ``RS`` sizes (``Dataset._calcu_split_ids``: floor(ratio x n) for valid and test, one
    more for a split whose share is under one entry while train keeps more than one, train the rest)."""
    users = np.asarray(users, dtype=np.int64)
    ratios = np.asarray(ratios, dtype=np.float64) / float(sum(ratios))
    order = np.lexsort((np.random.default_rng(seed).random(len(users)), users))
    counts = np.bincount(users)
    n = counts.astype(np.float64)
    sizes = [None, np.floor(ratios[1] * n).astype(np.int64), np.floor(ratios[2] * n).astype(np.int64)]
    train = counts - sizes[1] - sizes[2]
    for index in (2, 1):  # RecBole's loop: test first, then valid, while train keeps more than one
        bump = (train > 1) & (ratios[index] * n > 0) & (ratios[index] * n < 1)
        sizes[index] = sizes[index] + bump
        train = train - bump
    sorted_users = users[order]
    rank = np.arange(len(users)) - (np.cumsum(counts) - counts)[sorted_users]
    split_sorted = (rank >= train[sorted_users]).astype(np.int64) + (rank >= (train + sizes[1])[sorted_users])
    split = np.empty(len(users), dtype=np.int64)
    split[order] = split_sorted
    return split


def canonical_rows(frame, first):
    """The order of ``frame``'s rows sorted by the columns ``first``, then by its other scalar columns (token
    text, numbers): a function of the rows' content only (None: keep the rows as they are). Columns are ranked
    with ``pandas.factorize`` (a sort of the distinct values) and the rows ordered with one ``numpy.lexsort``."""
    if frame is None or len(frame) < 2:
        return None
    keys = []
    for column in [c for c in first if c in frame.columns] + [c for c in frame.columns if c not in first]:
        values = frame[column]
        if values.dtype == object and len(values) and not isinstance(values.iloc[0], str):
            continue  # sequences (token_seq, float_seq): the scalar columns already fix the order
        if isinstance(values.dtype, pd.CategoricalDtype) and values.cat.categories.is_monotonic_increasing:
            codes = values.cat.codes.to_numpy()  # sorted categories: the codes are the ranks (NaN: -1)
        else:
            codes, _ = pd.factorize(values, sort=True, use_na_sentinel=True)
        keys.append(codes)
    if not keys:
        return None
    widths = [int(key.max(initial=-1)) + 2 for key in keys]  # codes are >= -1 (NaN)
    if np.prod(np.array(widths, dtype=np.float64)) >= 2.0**62:
        return np.lexsort(keys[::-1])
    combined = np.zeros(len(frame), dtype=np.int64)  # one int64 key: one stable sort, not one per column
    for key, width in zip(keys, widths):
        combined *= width
        combined += key + 1
    return np.argsort(combined, kind="stable")


def _rows(interaction, mask):
    """``interaction[mask]`` (RecBole's ``Interaction.__getitem__`` turns the mask into a Python list first:
    20 s for three splits of 10^7 likes)."""
    mask = torch.from_numpy(np.asarray(mask, dtype=bool))
    return Interaction({field: values[mask] for field, values in interaction.interaction.items()})


class ColdStartDataset(Dataset):
    """A RecBole Dataset whose ``build()`` partitions items, not interactions, when ``eval_args.group_by`` is
    ``item``. Its split datasets share one id remapping, vocabulary and ``item_feat``; ``inter_feat`` holds a
    split's likes only. With ``item_token_rows_only`` (set by ``data_preparation`` for the models that read
    their own features) the .item file's ``token_seq`` fields are kept in ``item_token_rows``, not padded
    into ``item_feat``."""

    phase = None  # train, valid or test
    split_items = None  # sorted internal ids of the split's items: valid/test candidates, train's negative pool
    _coded = None  # token_seq field -> vocabulary of the reader's codes
    _reader_rows = None  # token_seq field -> the reader's CodedSequences, in the table's row order, until _remap

    def __str__(self):
        """RecBole's summary with real counts: ``user_num`` and ``item_num`` include the padding id 0."""
        users, items = max(self.user_num - 1, 0), max(self.item_num - 1, 0)
        lines = [
            self.dataset_name,
            f"The number of users: {users}",
            f"Average actions of users: {self.inter_num / max(users, 1):.2f}",
            f"The number of items: {items}",
            f"Average actions of items: {self.inter_num / max(items, 1):.2f}",
            f"The number of inters: {self.inter_num}",
            f"The sparsity of the dataset: {100 * (1 - self.inter_num / max(users * items, 1)):.4f}%",
            f"Remain Fields: {list(self.field2type)}",
        ]
        return "\n".join(lines)

    preread = None  # set by ``preparation.create_dataset``: token columns the files' checks already parsed
    dislike_feat = None  # the split's explicit dislikes (label 0), None for implicit data
    _hidden_fields = frozenset()
    _skip_feature_join = False
    item_token_rows_only = False
    item_token_rows = None  # {token_seq field of the .item file: (indptr, indices)}, CSR rows without padding

    # ----------------------------------------------------------------------------------------- split
    cold_items = None  # hybrid scenario: the split's cold items (sorted internal ids; none in train)
    warm_items = None  # hybrid scenario: the warm items (candidates of every split, the training negative pool)

    def build(self):
        if not self.config.item_split:
            return super().build()
        self._change_feat_format()
        if self.config.hybrid:
            return self._build_hybrid()
        split_of_item = self.item_split_assignment()
        phase_of_row = split_of_item[self.inter_feat[self.iid_field].numpy()]
        datasets = self._split_parts(phase_of_row, [np.flatnonzero(split_of_item == k) for k in range(3)])
        self._check_candidates(datasets[1:], sum(len(part.split_items) for part in datasets))
        return datasets

    def _split_parts(self, phase_of_row, split_items):
        """One dataset per phase: the rows of ``phase_of_row`` k that are likes, the others as ``dislike_feat``;
        each split needs a like (train too: no like in train means no training data at all)."""
        hybrid = self.config.hybrid
        likes = np.ones(len(self.inter_feat), dtype=bool)  # likes: label 1 where there is a label (threshold)
        if self.label_field in self.inter_feat:
            likes = self.inter_feat[self.label_field].numpy() >= 0.5
        datasets = []
        for index, phase in enumerate(PHASES):
            in_split = phase_of_row == index
            part = self.copy(_rows(self.inter_feat, in_split & likes))
            part.phase, part.split_items = phase, split_items[index]
            dislikes = in_split & ~likes
            part.dislike_feat = _rows(self.inter_feat, dislikes) if dislikes.any() else None
            datasets.append(part)
            if len(part.inter_feat) == 0:
                raise ColdStartError(
                    f"dataset {self.dataset_name!r}: the {'hybrid' if hybrid else 'item'} split leaves the {phase} "
                    f"split ({len(part.split_items)} items) without any liked interaction; use more data or change "
                    + ("hybrid_cold_ratio / hybrid_warm_split." if hybrid else "eval_args.split.")
                )
        return datasets

    def _build_hybrid(self):
        """The hybrid scenario's splits (``cold_start_scenario: hybrid``): a share ``hybrid_cold_ratio`` of the
        items with interactions become cold items (half validation, half test; ``item_split`` with split_seed),
        none of their interactions in training; each user's interactions with the other (warm) items are split
        ``hybrid_warm_split`` at random (distinct (user, item) pairs: a warm test like is never a training
        interaction). Every split's candidates (``split_items``) are the warm items plus its own cold items."""
        cold_share = float(setting(self.config, "hybrid_cold_ratio"))
        split_of_item = self.item_split_assignment(
            (1.0 - cold_share, cold_share / 2, cold_share / 2), "hybrid_cold_ratio"
        )
        users = self.inter_feat[self.uid_field].numpy().astype(np.int64)
        items = self.inter_feat[self.iid_field].numpy().astype(np.int64)
        warm = split_of_item[items] == 0
        pairs, pair_of_row = np.unique(users[warm] * self.item_num + items[warm], return_inverse=True)
        pair_split = per_user_split(
            pairs // self.item_num, setting(self.config, "hybrid_warm_split"), [int(self.config.split_seed), 1]
        )
        phase_of_row = split_of_item[items].copy()  # cold rows: their item's split (1 or 2)
        phase_of_row[warm] = pair_split[pair_of_row.reshape(-1)]
        warm_items = np.flatnonzero(split_of_item == 0)
        cold = [np.zeros(0, dtype=np.int64)] + [np.flatnonzero(split_of_item == k) for k in (1, 2)]
        datasets = self._split_parts(phase_of_row, [np.union1d(warm_items, cold_items) for cold_items in cold])
        for part, cold_items in zip(datasets, cold):
            part.warm_items, part.cold_items = warm_items, cold_items
        self._check_candidates(datasets[1:], len(np.flatnonzero(split_of_item >= 0)))
        return datasets

    def _check_candidates(self, parts, n_split_items):
        """A split with no more items than the largest cut-off puts every candidate in every top-k list:
        Recall@k is 1.0 for every model, a meaningless figure reported as a result. The message names both
        settings that decide it: ``topk``, and the split ratios applied to the dataset's items."""
        topk = self.config["topk"]  # a list (RecBole's configuration makes one of a single cut-off)
        largest = max(topk)
        if self.config.hybrid:
            split_settings = (
                f"hybrid_cold_ratio {setting(self.config, 'hybrid_cold_ratio')} and hybrid_warm_split "
                f"{list(setting(self.config, 'hybrid_warm_split'))}"
            )
        else:
            split_settings = f"eval_args.split RS {list(self.config['eval_args']['split']['RS'])}"
        for part in parts:
            n = len(part.split_items)
            if n <= largest:
                lower = f"lower topk (now {list(topk)}) below {n}, or " if n > 1 else ""
                raise ColdStartError(
                    f"dataset {self.dataset_name!r}: the {part.phase} split has {n} item(s), not more than the "
                    f"largest topk ({largest}): every item would be in every top-{largest} list (Recall@{largest} = "
                    f"1.0 for any model); {lower}give the {part.phase} split more items ({split_settings} "
                    f"of the dataset's {n_split_items} items with interactions)."
                )

    def item_split_assignment(self, ratios=None, setting_name="eval_args.split.RS"):
        """Array ``split_of_item[internal_id]`` in {0: train, 1: valid, 2: test, -1: no interaction}.

        The items that have interactions are ordered by their external token (so the result does not
        depend on file order or internal ids) and shuffled with ``split_seed`` (default: ``seed``).
        ``ratios``: (train, valid, test) shares (default ``eval_args.split.RS``).
        """
        ratios = self.config["eval_args"]["split"]["RS"] if ratios is None else ratios
        items = np.flatnonzero(np.bincount(self.inter_feat[self.iid_field].numpy(), minlength=self.item_num))
        tokens = self.field2id_token[self.iid_field][items]
        try:
            split_of_token = item_split(tokens, ratios, self.config.split_seed, setting_name)
        except ColdStartError as error:
            raise ColdStartError(f"dataset {self.dataset_name!r} is too small to split: {error}") from None
        split_of_item = np.full(self.item_num, -1, dtype=np.int64)
        split_of_item[items] = split_of_token
        return split_of_item

    # ------------------------------------------------------------------------------ canonical order
    def _load_data(self, token, dataset_path):
        """RecBole's loading, then every table in a canonical row order (``_remap`` numbers users, items and
        tokens in sorted order): ids, vocabularies and batches then depend on the data, not on the order of
        the files' lines (the same likes in another order gave other results)."""
        super()._load_data(token, dataset_path)
        for name, first in (
            ("inter_feat", [self.uid_field, self.iid_field]),
            ("item_feat", [self.iid_field]),
            ("user_feat", [self.uid_field]),
        ):
            frame = getattr(self, name)
            order = canonical_rows(frame, first)
            if order is not None:
                setattr(self, name, frame.iloc[order].reset_index(drop=True))
                for field in set(self._reader_rows or {}) & set(frame.columns):
                    self._reader_rows[field] = self._reader_rows[field].take(order)

    def _remap(self, remap_list):
        """RecBole's remapping of tokens to ids, with ids in sorted token order instead of first appearance:
        a user's, an item's or a feature token's id then depends only on which tokens exist, not on the
        interactions (adding validation/test likes of existing items no longer renumbers items, which moved
        the negatives a seed draws and so the trained model). Tokens are numbered by their codes
        (``Categorical`` columns, coded ``token_seq`` columns of the reader): only the distinct texts
        are sorted; every token the remaining rows use gets an id, missing cells ``[PAD]`` (0)."""
        if len(remap_list) == 0:
            return
        parts = [self._token_codes(feat, field, ftype) for feat, field, ftype in remap_list]
        vocabularies = [vocabulary for _, vocabulary, _ in parts]
        texts = np.concatenate(vocabularies).astype(str) if vocabularies else np.zeros(0, dtype=str)
        order = np.argsort(texts, kind="stable")
        new_distinct = np.ones(len(texts), dtype=bool)
        new_distinct[1:] = texts[order][1:] != texts[order][:-1]
        global_code = np.empty(len(texts), dtype=np.int64)
        global_code[order] = np.cumsum(new_distinct) - 1
        offsets = np.cumsum([0] + [len(v) for v in vocabularies])
        n_global = int(new_distinct.sum())
        used = np.zeros(n_global + 1, dtype=bool)  # last slot: missing
        mapped = []
        for (codes, _, _), offset in zip(parts, offsets):
            codes = np.where(codes >= 0, global_code[np.maximum(codes, 0) + offset], n_global) if len(codes) else codes
            used[codes] = True
            mapped.append(codes)
        new_id = np.zeros(n_global + 1, dtype=np.int64)
        new_id[:n_global] = np.cumsum(used[:n_global]) * used[:n_global]
        tokens = texts[order][new_distinct][used[:n_global]]
        mp = np.array(["[PAD]"] + tokens.tolist())
        token_id = TokenIds(mp)
        for (feat, field, ftype), codes, (_, _, lengths) in zip(remap_list, mapped, parts):
            if field not in self.field2id_token:
                self.field2id_token[field] = mp
                self.field2token_id[field] = token_id
            new_ids = new_id[codes]
            if ftype == FeatureType.TOKEN:
                feat[field] = new_ids
            elif ftype == FeatureType.TOKEN_SEQ:
                feat[field] = split_rows(new_ids, lengths)

    def _token_codes(self, feat, field, ftype):
        """(code per token, distinct texts the codes index, tokens per row or None) of one column: from a
        ``Categorical``, from the reader's coded ``token_seq``, or by factorising text (RecBole's additional files)."""
        values = feat[field]
        if ftype == FeatureType.TOKEN:
            return codes_of(values) + (None,)
        rows = (self._reader_rows or {}).pop(field, None)
        if rows is not None and len(rows.counts) == len(values):  # the reader's rows, none dropped since: as read
            return rows.codes.astype(np.int64), rows.vocabulary, rows.counts
        sequences = values.to_numpy()
        lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))
        vocabulary = (self._coded or {}).get(field)
        if vocabulary is not None:  # every row an int32 array of the reader's codes
            flat = np.concatenate(sequences) if len(sequences) else np.zeros(0, dtype=np.int32)
            return flat.astype(np.int64), vocabulary, lengths
        filled = [sequence for sequence in sequences if len(sequence)]
        flat = np.concatenate(filled) if filled else np.zeros(0, dtype=np.int64)
        codes, uniques = pd.factorize(flat.astype(object)) if len(flat) else (np.zeros(0, dtype=np.int64), [])
        return codes.astype(np.int64), np.asarray(uniques, dtype=object), lengths

    def _filter_by_inter_num(self):
        """RecBole's filter, skipped when its intervals keep every id (RecBole's default ``[0,inf)`` for a dataset of
        one's own): RecBole counts the tokens with ``Counter``s, seconds at 10^7 likes, to drop nothing."""
        keys = ("user_inter_num_interval", "item_inter_num_interval")
        intervals = [self._parse_intervals_str(self.config[key]) for key in keys]
        if any(i is not None and not (i and i[0][1] <= 0 and i[0][2] == np.inf) for i in intervals):
            super()._filter_by_inter_num()

    # --------------------------------------------------------------------------------------- reading
    def _loaded_columns(self, filepath, source):
        """[(field, FeatureType, 'field:type' header column)] of the columns RecBole's ``_load_feat`` loads
        from ``filepath`` (``load_col`` / ``unload_col``); None when ``load_col`` leaves the file out."""
        load_col, unload_col = self._get_load_and_unload_col(source)
        if load_col == set():
            return None
        header = read_header(filepath, self.config["field_separator"], self.config["encoding"] or "utf-8")
        return [
            (field, FeatureType(kind), f"{field}:{kind}")
            for field, kind in header.items()
            if (load_col is None or field in load_col) and (unload_col is None or field not in unload_col)
        ]

    def _cut_to_seq_len(self, field, rows, longest):
        """``rows`` (one array per row, the longest ``longest`` long) as an object column cut to ``seq_len``, as
        RecBole cuts them; the longest kept length is the field's ``field2seqlen``."""
        limit = (self.config["seq_len"] or {}).get(field)
        self.field2seqlen[field] = longest if limit is None else min(limit, longest)
        return pd.Series(rows if limit is None or longest <= limit else [row[:limit] for row in rows], dtype=object)

    def _load_feat(self, filepath, source):
        """RecBole's ``_load_feat`` (same rows, same field properties) of the interaction, user and item files
        through ``fast_load`` (pyarrow). Token columns come back as sorted ``Categorical`` and ``token_seq``
        columns as codes (``_coded``), which ``_remap`` numbers.

        For context-aware models the .item file's ``token_seq`` fields keep each token once, in order of first
        occurrence, before ``seq_len`` (``context_distinct_tokens``, default True): the converters repeat a term
        per occurrence for FBSM's tf-idf, but a context model mean-pools a sequence RecBole pads to the longest
        item (1,231 tokens on citeulike-t against 16 distinct terms): 20 times the cost for nearly the same input.
        """
        if not isinstance(source, FeatureSource):
            return super()._load_feat(filepath, source)
        loaded = self._loaded_columns(filepath, source)
        if not loaded:
            if loaded is not None:
                self.logger.warning(f"No columns has been loaded from [{source}]")
            return None
        columns = read_feat_columns(
            filepath,
            self.config["field_separator"],
            self.config["seq_separator"],
            {header: ftype.value for _, ftype, header in loaded},
            self.config["encoding"],
            store=self.preread,
        )
        distinct = (
            source == FeatureSource.ITEM
            and self.config["MODEL_TYPE"] == ModelType.CONTEXT
            and self.config["context_distinct_tokens"] is not False
        )
        frame = {}
        for field, ftype, header in loaded:
            self.field2source[field], self.field2type[field] = source, ftype
            if "float" in ftype.value:
                self.field2bucketnum[field] = 2
            column, sequences = columns[header], None  # sequences: the reader's layout while the rows are its own
            if ftype == FeatureType.TOKEN_SEQ:
                self._coded = {**(self._coded or {}), field: column.vocabulary}
                sequences = None if distinct else column
                column = [pd.unique(row) for row in column.column] if distinct else column.column
            if ftype in (FeatureType.TOKEN_SEQ, FeatureType.FLOAT_SEQ):
                longest = (
                    max(map(len, column), default=0) if sequences is None else int(sequences.counts.max(initial=0))
                )
                column = self._cut_to_seq_len(field, column, longest)
                if sequences is not None and self.field2seqlen[field] == longest:  # none cut to seq_len
                    self._reader_rows = {**(self._reader_rows or {}), field: sequences}
            else:
                self.field2seqlen[field] = 1
            frame[field] = column
        return pd.DataFrame(frame)

    def _dataframe_to_interaction(self, data):
        """RecBole's conversion to an ``Interaction``; sequence fields are padded by one numpy scatter
        instead of one tensor per row (14 s for 2 million items). With ``item_token_rows_only`` the .item
        file's ``token_seq`` fields go to ``item_token_rows`` unpadded, not into ``item_feat``."""
        if len(data) == 0:
            return super()._dataframe_to_interaction(data)
        numerical = self.config["numerical_features"] or []
        rows_only = self.item_token_rows_only and data is self.item_feat
        new_data = {}
        for field in data:
            ftype = self.field2type[field]
            if rows_only and ftype == FeatureType.TOKEN_SEQ:
                self.item_token_rows = {
                    **(self.item_token_rows or {}),
                    field: sequence_rows(data[field].values, self.field2seqlen[field]),
                }
                continue
            if ftype == FeatureType.TOKEN_SEQ or (ftype == FeatureType.FLOAT_SEQ and field not in numerical):
                dtype = np.int64 if ftype == FeatureType.TOKEN_SEQ else np.float32
                new_data[field] = torch.from_numpy(pad_sequences(data[field].values, self.field2seqlen[field], dtype))
            else:
                new_data.update(super()._dataframe_to_interaction(data[[field]]).interaction)
        return Interaction(new_data)

    # ------------------------------------------------------------------------------ field visibility
    def fields(self, ftype=None, source=None):
        return [f for f in super().fields(ftype, source) if f not in self._hidden_fields]

    @contextmanager
    def hidden_fields(self, *names):
        """Hide fields from ``fields()`` while a model is constructed.

        RecBole's context-aware models embed every field ``fields()`` lists; hiding ``item_id`` makes
        them content models, since an id embedding means nothing for an item never seen in training.
        """
        previous = self._hidden_fields
        self._hidden_fields = frozenset(previous | set(names))
        try:
            yield self
        finally:
            self._hidden_fields = previous

    def join(self, df):
        """Skip RecBole's per-batch join of user/item feature columns for models that read their own
        feature matrices (it is about 40% of a BPR epoch on ml-100k)."""
        if self._skip_feature_join:
            return df
        return super().join(df)
