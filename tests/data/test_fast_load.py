"""The reading of atomic files (``data/fast_load.py``, pyarrow) gives exactly RecBole's dataset (its own
``Dataset._load_feat``, pandas, with the one change the plugin makes: NA, null, ... are tokens): same fields,
vocabularies, ids, interaction and item rows, split; on files with the odd cases a hand-written or
converted file has (empty and NA cells, repeated tokens, runs of separators, non-ASCII and long tokens,
ids missing from the .item file, items without interactions, ``seq_len``, quoted fields, \r\n line ends,
a separator of two characters)."""

from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
import torch.nn.utils.rnn as rnn_utils
from pandas._libs.parsers import STR_NA_VALUES
from recbole.data.dataset import Dataset
from recbole.utils import FeatureSource, FeatureType, ModelType

import recbole_fbsm.data.dataset as dataset_module
from recbole_fbsm.config.cold_start_config import ColdStartConfig
from recbole_fbsm.data import fast_load
from recbole_fbsm.data.dataset import ColdStartDataset
from recbole_fbsm.data.fast_load import pad_sequences, read_feat_columns

ODD_CELLS = ["a b c", "", "  a  a   b ", "NA", "x", "é 中文 é", "b NA a", " ", "7 007 7.0", "null", "a b "]


def recbole_split(cell, separator):
    """RecBole 1.2.1's parsing of one token_seq cell (``Dataset._load_feat``)."""
    return list(filter(None, cell.split(separator)))


def small_config(root, name, item_fields, model="FBSM", **settings):
    """A quiet CPU config of dataset ``name`` under ``root`` loading ``item_fields``; a like is a rating >= 4."""
    return ColdStartConfig(
        model=model,
        dataset=name,
        config_dict=dict(
            state="ERROR",
            use_gpu=False,
            data_path=str(root),
            checkpoint_dir=str(root / "saved"),
            load_col={"inter": ["user_id", "item_id", "rating"], "item": ["item_id", *item_fields]},
            threshold={"rating": 4},
            topk=[3],
            valid_metric="Recall@3",
            **settings,
        ),
    )


def write_columns(path, rows, header="id:token\twords:token_seq\tscore:float"):
    path.write_text(header + "\n" + "\n".join("\t".join(row) for row in rows) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "extra",
    [[], ["a_token_of_more_than_eight_bytes", "ünïcödé_longer_than_sixteen_bytes"]],
    ids=["one-word-keys", "several-word-keys"],
)
def test_read_feat_columns_matches_recbole_reader(tmp_path, extra):
    cells = ODD_CELLS + [" ".join(extra)]
    ids = ["i1", "NA", "", "i1", "é", "007", "7", "null", "x y", "i1", "7.0"] + extra[:1]
    scores = ["1", "", "2.5", " 4 ", "-0.125", "3e-5", "1", "2", "0.1", "1e400", "5"] + ["6"] * len(extra[:1])
    path = write_columns(tmp_path / "f.item", list(zip(ids, cells, scores)))
    kinds = {"id:token": "token", "words:token_seq": "token_seq", "score:float": "float"}
    columns = read_feat_columns(str(path), "\t", " ", kinds, "utf-8")
    ids = pd.Series(columns["id:token"]).astype(object)
    expected = pd.read_csv(
        path,
        delimiter="\t",
        dtype={"id:token": str, "words:token_seq": str, "score:float": np.float64},
        engine="python",
        keep_default_na=False,
        na_values={"id:token": [""], "words:token_seq": [""], "score:float": [""]},
    )
    assert "NA" in expected["id:token"].tolist() and "null" in expected["id:token"].tolist()  # ids, not missing
    assert (
        ids.where(ids.notna(), None).tolist()
        == expected["id:token"].astype(object).where(expected["id:token"].notna(), None).tolist()
    )
    assert np.array_equal(columns["score:float"], expected["score:float"].to_numpy(), equal_nan=True)
    vocabulary = columns["words:token_seq"].vocabulary
    assert list(vocabulary) == sorted(vocabulary)
    for cell, codes in zip(expected["words:token_seq"].fillna(""), columns["words:token_seq"].column):
        assert list(vocabulary[codes]) == recbole_split(cell, " "), cell


def test_pad_sequences_is_recbole_pad_sequence():
    values = [np.array([3, 1, 2]), np.array([], dtype=np.int64), np.array([5, 6, 7, 8, 9])]
    for limit in (2, 5, 10):
        expected = rnn_utils.pad_sequence([torch.LongTensor(v[:limit]) for v in values], batch_first=True)
        assert torch.equal(torch.from_numpy(pad_sequences(values, limit, np.int64)), expected)


# ------------------------------------------------------------------------------- whole datasets
def write_odd_dataset(root, name="odd", empty_rating=True, na_ids=True):
    """Items with odd feature cells, a user and an item id ``NA`` (RecBole's own reader took them for
    missing; both readers must read them as ids), interactions of an item that has no .item row, items
    without interactions."""
    rng = np.random.default_rng(3)
    folder = root / name
    folder.mkdir(parents=True)
    items = [f"i{k:03d}" for k in range(60)] + ["é-item", "007", "7"]
    lines = ["user_id:token\titem_id:token\trating:float"]
    for u in range(40):
        for item in rng.choice(items, size=8, replace=False):
            lines.append(f"u{u}\t{item}\t{rng.integers(1, 6)}")
    lines += (
        ["u1\tnot_in_item_file\t5"]
        + (["NA\ti001\t5", "u2\tNA\t4"] if na_ids else [])
        + (["u3\ti002\t"] if empty_rating else [])
    )
    (folder / f"{name}.inter").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = ["item_id:token\twords:token_seq\ttags:token_seq\tprice:float\tvec:float_seq"]
    for k, item in enumerate(items + ["never_liked_1", "never_liked_2"]):
        words = ODD_CELLS[k % len(ODD_CELLS)]
        tags = " ".join(rng.choice(["tag_with_a_long_name", "t", "NA", "ü"], size=k % 4))
        price = "" if k % 7 == 0 else f"{k / 3:.3f}"
        vec = "" if k % 5 == 0 else f"{k} {k / 2}  0.5"
        rows.append(f"{item}\t{words}\t{tags}\t{price}\t{vec}")
    (folder / f"{name}.item").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return name


def test_a_float_seq_column_reads_as_recbole_reads_it(tmp_path, monkeypatch):
    name = write_odd_dataset(tmp_path)
    config = small_config(tmp_path, name, ["words", "vec"], feature_fields=["words"])
    fast, _ = load(config, True, monkeypatch)
    slow, _ = load(config, False, monkeypatch)
    assert fast.item_feat["vec"].shape[1] == 3
    assert_same(fast, slow)


@pytest.mark.parametrize("variant", ["quoted", "crlf-rows", "two-character-separator"])
def test_files_pandas_reads_its_own_way_read_as_recbole_reads_them(tmp_path, monkeypatch, variant):
    """Quoted fields (a field that starts with a double quote), \r\n line ends after the header and a
    separator of two characters: pyarrow reads them as RecBole's pandas reader does."""
    name = write_odd_dataset(tmp_path)
    settings = {"field_separator": "::"} if variant == "two-character-separator" else {}
    for suffix in ("inter", "item"):
        path = tmp_path / name / f"{name}.{suffix}"
        header, *rows = path.read_text(encoding="utf-8").splitlines()
        if variant == "quoted":  # every second row's second field (item_id, words) quoted, one with quotes inside
            cells = [row.split("\t") for row in rows]
            for k, row in enumerate(cells[::2]):
                row[1] = '"x ""quoted"" y"' if suffix == "item" and k == 1 else f'"{row[1]}"'
            rows = ["\t".join(row) for row in cells]
        text = header + "\n" + ("\r\n" if variant == "crlf-rows" else "\n").join(rows) + "\n"
        path.write_text(text.replace("\t", settings.get("field_separator", "\t")), encoding="utf-8", newline="")
    config = small_config(tmp_path, name, ["words", "tags", "price"], **settings)
    fast, _ = load(config, True, monkeypatch)
    slow, _ = load(config, False, monkeypatch)
    assert_same(fast, slow)
    if variant == "quoted":
        assert '"quoted"' in fast.field2id_token["words"].tolist()


def sorted_remap(self, remap_list):
    """The plugin's numbering before the fast path: RecBole's ``_remap`` with ``factorize(sort=True)``."""
    if len(remap_list) == 0:
        return
    tokens, split_point = self._concat_remaped_tokens(remap_list)
    new_ids_list, mp = pd.factorize(tokens, sort=True)
    new_ids_list = np.split(new_ids_list + 1, split_point)
    mp = np.array(["[PAD]"] + list(mp))
    token_id = {t: i for i, t in enumerate(mp)}
    for (feat, field, ftype), new_ids in zip(remap_list, new_ids_list):
        if field not in self.field2id_token:
            self.field2id_token[field] = mp
            self.field2token_id[field] = token_id
        if ftype == FeatureType.TOKEN:
            feat[field] = new_ids
        elif ftype == FeatureType.TOKEN_SEQ:
            feat[field] = np.split(new_ids, np.cumsum(feat[field].agg(len))[:-1])


def read_csv_with_na_tokens(filepath, **kwargs):
    """``pandas.read_csv`` as RecBole's ``_load_feat`` calls it, with the plugin's one change: a token cell is
    missing only when empty (RecBole took NA, null, nan, ... for missing)."""
    na_values = {column: [""] if kind is str else list(STR_NA_VALUES) for column, kind in kwargs["dtype"].items()}
    return PANDAS_READ_CSV(filepath, keep_default_na=False, na_values=na_values, **kwargs)


PANDAS_READ_CSV = pd.read_csv


def recbole_load_feat(self, filepath, source):
    """RecBole's ``_load_feat``, then for context-aware models each item's tokens once, as the plugin keeps them."""
    df = Dataset._load_feat(self, filepath, source)
    if source == FeatureSource.ITEM and self.config["MODEL_TYPE"] == ModelType.CONTEXT:
        for field in [f for f in df.columns if self.field2type[f] == FeatureType.TOKEN_SEQ]:
            df[field] = [pd.unique(tokens) for tokens in df[field]]
            self.field2seqlen[field] = max(map(len, df[field]), default=0)
    return df


def load(config, fast, monkeypatch):
    """``ColdStartDataset`` and its split, read by the plugin, or by RecBole's own reader
    (``read_csv_with_na_tokens``), filters and conversion with the plugin's sorted numbering as it was before
    its fast path."""
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(ColdStartDataset, "_load_feat", recbole_load_feat)
            patch.setattr(pd, "read_csv", read_csv_with_na_tokens)
            for name in ("_dataframe_to_interaction", "_filter_by_inter_num", "_filter_inter_by_user_or_item"):
                patch.setattr(ColdStartDataset, name, getattr(Dataset, name))
            patch.setattr(ColdStartDataset, "_remap", sorted_remap)
        dataset = ColdStartDataset(config)
        return dataset, dataset.build()


def assert_same(a, b):
    assert a.field2type == b.field2type
    assert a.field2source == b.field2source
    assert a.field2seqlen == b.field2seqlen
    assert set(a.field2id_token) == set(b.field2id_token)
    for field in a.field2id_token:
        assert a.field2id_token[field].tolist() == b.field2id_token[field].tolist(), field
        assert a.field2token_id[field] == b.field2token_id[field], field
    for name in ("inter_feat", "item_feat", "user_feat"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None)
        if x is None:
            continue
        assert x.columns == y.columns, name
        for column in x.columns:
            assert x[column].dtype == y[column].dtype, (name, column)
            assert torch.equal(x[column], y[column]), (name, column)


@pytest.mark.parametrize(
    "model,settings",
    [
        ("FBSM", {}),
        ("FBSM", {"seq_len": {"words": 2}, "filter_inter_by_user_or_item": False}),
        ("FBSM", {"user_inter_num_interval": "[2,inf)", "rm_dup_inter": "first"}),
        ("FBSM", {"user_inter_num_interval": "[6,9]", "item_inter_num_interval": "[3,inf)"}),  # several rounds
        ("FM", {"train_neg_sample_args": {"distribution": "uniform", "sample_num": 1}}),  # distinct tokens
    ],
)
def test_fast_load_gives_recbole_dataset(tmp_path, monkeypatch, model, settings):
    name = write_odd_dataset(tmp_path)
    config = small_config(tmp_path, name, ["words", "tags", "price"], model=model, **settings)
    read = []
    original = fast_load.read_feat_columns
    monkeypatch.setattr(
        dataset_module, "read_feat_columns", lambda path, *a, **k: read.append(path) or original(path, *a, **k)
    )
    fast, fast_parts = load(config, True, monkeypatch)
    assert [path.rpartition(".")[2] for path in read] == ["inter", "item"]  # both went through pyarrow
    slow, slow_parts = load(config, False, monkeypatch)
    assert len(read) == 2
    assert fast.item_feat["words"].shape[1] > 0 and fast.item_feat["tags"].shape[1] > 0
    assert "NA" in fast.field2id_token["tags"].tolist()
    if "user_inter_num_interval" not in settings:  # user NA has one interaction
        assert "NA" in fast.field2id_token["user_id"].tolist()
    assert_same(fast, slow)
    for a, b in zip(fast_parts, slow_parts):
        assert a.phase == b.phase
        assert np.array_equal(a.split_items, b.split_items)
        assert_same(a, b)


def test_evaluation_loaders_set_up_users_as_recbole_does(toy, tmp_path):
    """Evaluated users, positives, history and RecBole's per-user tensors: from arrays, as RecBole's loop."""
    from recbole.data.dataloader import FullSortEvalDataLoader

    from recbole_fbsm.data.preparation import create_dataset, data_preparation
    from recbole_fbsm.data.sampler import liked_keys

    config = small_config(toy.root, toy.name, ["genre", "words"])
    _, valid, test = data_preparation(config, create_dataset(config), reads_own_features=True)
    for fast in (valid, test):
        sampler, n_items = fast._sampler, fast._dataset.item_num
        used_ids = defaultdict(set)  # RecBole's per-user sets of the phase's used ids
        for key in liked_keys(sampler.datasets[: sampler.phases.index(sampler.phase) + 1]).tolist():
            used_ids[key // n_items].add(key % n_items)
        slow = FullSortEvalDataLoader(config, fast._dataset, SimpleNamespace(used_ids=used_ids))  # RecBole's loop
        assert torch.equal(fast.uid_list, slow.uid_list)
        assert np.array_equal(fast.uid2items_num, slow.uid2items_num)
        assert torch.equal(fast.user_df[fast.uid_field], slow.user_df[slow.uid_field])
        for name, matrix in (("uid2positive_item", fast._positives), ("uid2history_item", fast._history)):
            indptr, indices = matrix.indptr.numpy(), matrix.indices.numpy()
            for user, b in enumerate(getattr(slow, name)):
                a = indices[indptr[user] : indptr[user + 1]]
                assert sorted(a.tolist()) == ([] if b is None else sorted(b.tolist()))
        assert sum(len(batch[0]) for batch in fast) == len(slow.uid_list)
        assert len(fast._history.indices)  # a test with history to compare


def test_canonical_order_sorts_rows_by_their_columns():
    from recbole_fbsm.data.dataset import canonical_rows

    rng = np.random.default_rng(1)
    users = rng.choice(["u1", "u10", "u2", "é", None], size=300).astype(object)
    users[users == None] = np.nan  # noqa: E711
    frame = pd.DataFrame(
        {
            "user_id": users,
            "item_id": rng.choice(["b", "a", "c"], size=300),
            "rating": rng.integers(1, 6, size=300).astype(float),
        }
    )
    expected = frame.sort_values(["user_id", "item_id", "rating"], na_position="first", kind="stable")
    for version in (frame, frame.astype({"user_id": "category", "item_id": "category"})):
        ordered = version.iloc[canonical_rows(version, ["user_id", "item_id"])].reset_index(drop=True)
        assert ordered.astype(object).equals(expected.reset_index(drop=True).astype(object))


def test_the_checks_parse_each_file_once_for_the_dataset(tmp_path, monkeypatch):
    """The token columns the files' checks parsed are handed to the dataset (same dataset as a fresh read)."""
    from recbole_fbsm.data import preparation

    name = write_odd_dataset(tmp_path, empty_rating=False)  # the checks refuse an empty rating
    config = small_config(tmp_path, name, ["words", "tags", "price"])
    parsed = []  # the token columns each read converts
    original = fast_load.pv.read_csv
    monkeypatch.setattr(
        fast_load.pv,
        "read_csv",
        lambda *args, **kwargs: (
            parsed.extend(c for c in kwargs["convert_options"].include_columns if c.endswith((":token", ":token_seq")))
            or original(*args, **kwargs)
        ),
    )
    report = preparation.check_dataset_files(config, reads_own_features=True)
    checked = len(parsed)
    assert checked == 5 and len(report.parsed) == 5  # user_id, item_id; item_id, words, tags
    shared = preparation.create_dataset(config, report)
    assert len(parsed) == checked and not report.parsed  # nothing parsed again, the store emptied
    shared_parts = shared.build()
    fresh, fresh_parts = load(config, True, monkeypatch)
    assert_same(shared, fresh)
    for a, b in zip(shared_parts, fresh_parts):
        assert_same(a, b)


def test_codes_are_one_sorted_numbering_across_the_readers_blocks():
    """pyarrow reads a file in blocks: the codes index one sorted vocabulary of all blocks (texts, or decimal
    numbers sorted as texts), and token_seq cells split as RecBole splits them (empty tokens dropped)."""
    for blocks in (["x", "é", "x"], ["a", "x"]), (["12", "2", "0"], ["123", "12", "1"]), (["7", "07"], ["-1", "7"]):
        codes, vocabulary = fast_load.token_codes(pa.chunked_array([pa.array(block) for block in blocks]))
        cells = [cell for block in blocks for cell in block]
        assert list(vocabulary) == sorted(set(cells)) and list(vocabulary[codes]) == cells
    cells = ["b a", "", "  c ", "a"], ["é  b", "zz"]
    sequences = fast_load.split_tokens(pa.chunked_array([pa.array(c) for c in cells]), " ")
    assert list(sequences.vocabulary) == ["a", "b", "c", "zz", "é"]
    expected = [recbole_split(cell, " ") for chunk in cells for cell in chunk]
    assert [list(sequences.vocabulary[row]) for row in sequences.column] == expected


def test_taking_coded_rows_keeps_each_rows_codes_in_the_new_order():
    """``CodedSequences.take`` (the reader's layout carried through the canonical row order) equals taking the
    per-row arrays, empty rows included."""
    sequences = fast_load.CodedSequences(np.array([5, 6, 7, 8, 9, 4], dtype=np.int32), np.array([2, 0, 3, 1]), None)
    order = np.array([3, 1, 0, 2, 0])
    taken = sequences.take(order)
    assert [list(row) for row in taken.column] == [list(sequences.column[i]) for i in order]
