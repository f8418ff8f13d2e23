"""What saves memory changes no result.

- The .item file's token_seq fields kept unpadded for the models that read their own features
  (``ColdStartDataset.item_token_rows``, not RecBole's rows padded to the longest item): the same F, F_U, R,
  scores and metrics as from the padded rows, which remain the path of RecBole's context-aware models.
- Evaluation: the candidates' V f_i kept across batches is recomputed once V changes; scores do not depend
  on ``eval_batch_size``.
- The user profiles F_U = R F built by blocks of users hold scipy's whole product exactly; entry keys for
  lookups are built only by a lookup."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from helpers import QUIET, dataset_config, write_dataset

from recbole_fbsm.data.dataset import ColdStartDataset
from recbole_fbsm.data.fast_load import pad_sequences, sequence_rows
from recbole_fbsm.data.features import features_from_config
from recbole_fbsm.kernels.sparse import TorchCsr
from recbole_fbsm.quick_start import prepare, run
from recbole_fbsm.training.trainer import get_trainer


def test_sequence_rows_hold_the_padded_rows_without_the_padding():
    rng = np.random.default_rng(0)
    values = [rng.integers(0, 9, size=n) for n in rng.integers(0, 12, size=50)]  # 0 ([PAD]) is left out
    for limit in (1, 3, 7, 100):
        padded = pad_sequences(values, limit, np.int64)
        indptr, indices = sequence_rows(values, limit)
        kept = padded > 0
        assert indices.dtype == np.int32 and indptr.dtype == np.int64
        np.testing.assert_array_equal(indptr, np.r_[0, np.cumsum(kept.sum(axis=1))])
        np.testing.assert_array_equal(indices, padded[kept])
    indptr, indices = sequence_rows(np.empty(0, dtype=object), 5)
    assert list(indptr) == [0] and len(indices) == 0


def _repeated_words(tmp_path):
    """The generated toy data with a word repeated in some items (term counts above 1)."""
    data = write_dataset(tmp_path, "toy")
    lines = data.item_path.read_text().splitlines()
    rows = [lines[0]]
    for k, line in enumerate(lines[1:]):
        item, genre, words = line.split("\t")
        rows.append("\t".join([item, genre, words + (" " + words.split()[0]) * (k % 3)]))
    data.item_path.write_text("\n".join(rows) + "\n")
    return data


def _padded(monkeypatch):
    """RecBole's padded item_feat for every model (the code before ``item_token_rows``)."""
    monkeypatch.setattr(
        ColdStartDataset, "item_token_rows_only", property(lambda self: False, lambda self, value: None)
    )


def _cases(tmp_path):
    data = _repeated_words(tmp_path)
    return {
        "ml-100k": ("ml-100k", dict(QUIET, checkpoint_dir=str(tmp_path / "saved"))),
        "generated": ("toy", dataset_config(data, feature_fields=["genre", "words"])),
        "generated-seq-len": ("toy", dataset_config(data, feature_fields=["genre", "words"], seq_len={"words": 3})),
    }


def _prepared(monkeypatch, padded, model, name, config):
    with monkeypatch.context() as patch:
        if padded:
            _padded(patch)
        return prepare(model, name, config_dict=dict(config))


@pytest.mark.parametrize("case", ["ml-100k", "generated", "generated-seq-len"])
def test_unpadded_rows_give_the_padded_rows_model_scores_and_metrics(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, config = _cases(tmp_path)[case]
    built = {}
    for padded in (True, False):
        config_, model, loaders = _prepared(monkeypatch, padded, "FBSM", name, config)
        trainer = get_trainer(config_["MODEL_TYPE"], config_["model"])(config_, model)
        untrained = trainer.evaluate(loaders[2], load_best_model=False)
        users = loaders[2].uid_list[:50]
        scores = model.score_candidates({model.USER_ID: users}, torch.as_tensor(loaders[2]._dataset.split_items))
        built[padded] = (model, loaders[0]._dataset, untrained, scores, config_)
    (padded_model, padded_data, *padded_results), (model, data, *results) = built[True], built[False]
    fields = [f for f in ("movie_title", "class", "genre", "words") if f in data.field2type]
    assert data.item_token_rows is not None and set(data.item_token_rows) == set(fields)
    assert not any(f in data.item_feat for f in fields) and all(f in padded_data.item_feat for f in fields)
    assert padded_data.item_token_rows is None
    assert model.feature_names == padded_model.feature_names
    for matrix in ("F", "F_U", "R"):
        for part in ("indptr", "indices", "values"):
            assert torch.equal(getattr(getattr(model, matrix), part), getattr(getattr(padded_model, matrix), part))
    assert torch.equal(results[1], padded_results[1])  # scores, bit for bit
    assert results[0] == padded_results[0]  # metrics of the untrained model
    # the rows are read, never changed: a second fit of the features is the same
    again = features_from_config(data, data.split_items, built[False][4], normalize=True).matrix
    once = features_from_config(data, data.split_items, built[False][4], normalize=True).matrix
    assert (again != once).nnz == 0
    # and a trained run: the same metrics
    trained = {}
    for padded in (True, False):
        with monkeypatch.context() as patch:
            if padded:
                _padded(patch)
            result = run("FBSM", name, config_dict=dict(config, epochs=2), saved=False)
        trained[padded] = (result["best_valid_result"], result["test_result"])
    assert trained[True] == trained[False]


def test_context_models_keep_the_padded_rows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = write_dataset(tmp_path, "toy")
    _, _, loaders = prepare("FM", "toy", config_dict=dataset_config(data))
    dataset = loaders[0]._dataset
    assert dataset.item_token_rows is None
    assert dataset.item_feat["words"].dim() == 2 and dataset.item_feat["genre"].dim() == 2


def test_scores_and_metrics_do_not_depend_on_the_evaluation_batch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = write_dataset(tmp_path, "toy", n_users=120, n_items=200)
    results = {}
    for cells in (1 << 24, 1 << 22, 2000):
        config, model, loaders = prepare(
            "FBSM", "toy", config_dict=dataset_config(data, feature_fields=["genre", "words"], eval_batch_size=cells)
        )
        trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
        trainer._train_epoch(loaders[0], 0)
        with torch.no_grad():
            users, candidates = loaders[2].uid_list, torch.as_tensor(loaders[2]._dataset.split_items)
            step = int(loaders[2].step)
            scores = torch.cat(
                [
                    model.score_candidates({model.USER_ID: users[k : k + step]}, candidates)
                    for k in range(0, len(users), step)
                ]
            )
        results[cells] = (step, scores, trainer.evaluate(loaders[2], load_best_model=False))
    steps = [step for step, _, _ in results.values()]
    assert steps[0] > steps[-1] > 0  # the batches did differ
    for _, scores, metrics in results.values():
        assert torch.equal(scores, results[1 << 24][1]) and metrics == results[1 << 24][2]


@pytest.mark.parametrize("rows_per_block", [1, 7, 1 << 14])
def test_profiles_built_by_blocks_equal_the_whole_product(rows_per_block):
    """F_U = R F built block by block holds exactly the entries and values of scipy's whole product (empty rows,
    empty blocks and the last partial block included), and fills only the entries it has."""
    rng = np.random.default_rng(3)
    likes = sp.random(200, 90, density=0.04, random_state=4, format="csr")
    likes.data[:] = 1.0
    likes = sp.csr_matrix(likes.multiply(rng.random((200, 1)) > 0.3))  # some users without likes
    features = sp.random(90, 60, density=0.1, random_state=5, format="csr")
    whole, blocks = TorchCsr(likes @ features), TorchCsr.product(likes, features, rows_per_block=rows_per_block)
    assert blocks.shape == whole.shape
    for name in ("indptr", "indices", "values"):
        assert torch.equal(getattr(blocks, name), getattr(whole, name)), name
    assert torch.equal(
        blocks.lookup(torch.tensor([0, 5, 199]), torch.tensor([3, 7, 59])),
        whole.lookup(torch.tensor([0, 5, 199]), torch.tensor([3, 7, 59])),
    )


def test_int32_column_indices_give_what_int64_ones_give():
    """Profiles and likes hold their column indices as int32 (half of F_U's largest array); every gather, lookup,
    product and sparse view answers as with int64 indices, and gathered columns are int64."""
    likes = sp.random(120, 70, density=0.05, random_state=6, format="csr")
    likes.data[:] = 1.0
    features = sp.random(70, 40, density=0.1, random_state=7, format="csr")
    wide, narrow = TorchCsr.product(likes, features), TorchCsr.product(likes, features, index_dtype=torch.int32)
    assert narrow.indices.dtype == torch.int32 and wide.indices.dtype == torch.int64
    assert TorchCsr(likes, index_dtype=torch.int32).indices.dtype == torch.int32
    rows, cols = torch.tensor([0, 7, 7, 119, 50]), torch.tensor([0, 3, 39, 12, 5])
    for a, b in zip(wide.gather_rows(rows), narrow.gather_rows(rows)):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert torch.equal(wide.lookup(rows, cols), narrow.lookup(rows, cols))
    assert torch.equal(wide.keys, narrow.keys)
    assert torch.equal(wide.dense_rows(rows), narrow.dense_rows(rows))
    assert torch.equal(wide.to_torch_sparse().to_dense(), narrow.to_torch_sparse().to_dense())


def test_entry_keys_are_built_only_when_an_entry_is_looked_up():
    """The sorted keys for lookups cost 8 bytes per entry: a matrix nobody searches never builds them."""
    matrix = TorchCsr(sp.csr_matrix(np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0]])))
    assert matrix._keys is None
    assert matrix.contains(torch.tensor([1, 1, 0]), torch.tensor([2, 1, 1])).tolist() == [True, False, True]
    assert matrix._keys.tolist() == [1, 3, 5]


def test_token_ids_are_built_by_the_first_lookup(tmp_path, monkeypatch):
    """``field2token_id`` tables (400 MB for 2 million items) are built only when a token is looked up, and
    then answer as RecBole's dicts did."""
    monkeypatch.chdir(tmp_path)
    data = write_dataset(tmp_path)
    config, _, (train, _, _) = prepare("FBSM", data.name, config_dict=dataset_config(data, epochs=1))
    dataset = train._dataset
    items = dataset.field2token_id[dataset.iid_field]
    assert "_table" not in vars(items) and len(items) == dataset.item_num
    token = dataset.field2id_token[dataset.iid_field][5]
    assert dataset.token2id(dataset.iid_field, token) == 5 and "_table" in vars(items)
    assert "[PAD]" in items and "no such item" not in items and items["[PAD]"] == 0
