"""Item features beyond one sparse field: several fields with their own weights, dense float_seq fields, and a
vocabulary (hence the model's start) that depends on the training items only."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from synthetic import write_atomic

from recbole_fbsm.data.features import build_item_features
from recbole_fbsm.quick_start import prepare, run
from recbole_fbsm.storage.safe_files import load_checkpoint

QUIET = {"state": "ERROR", "show_progress": False}


def two_field_data(folder, name="two", dense=None, test_item_words=None, seed=4):
    """80 items with ``words`` and ``tags`` (token_seq) and optionally ``emb`` (float_seq, ``dense``)."""
    rng = np.random.default_rng(seed)
    words = {f"i{i}": [f"w{w}" for w in rng.integers(0, 15, size=rng.integers(1, 6))] for i in range(80)}
    tags = {f"i{i}": [f"t{t}" for t in rng.integers(0, 6, size=rng.integers(1, 3))] for i in range(80)}
    interactions = sorted({(f"u{u}", f"i{i}") for u in range(30) for i in rng.choice(80, 8, replace=False)})
    if test_item_words:
        words.update(test_item_words)
    path = write_atomic(folder, name, interactions, words)
    header = "item_id:token\twords:token_seq\ttags:token_seq" + ("\temb:float_seq" if dense is not None else "")
    lines = [header]
    for item in words:
        row = [item, " ".join(words[item]), " ".join(tags[item])]
        if dense is not None:
            row.append(" ".join(f"{v:.17g}" for v in dense[item]))
        lines.append("\t".join(row))
    (path / f"{name}.item").write_text("\n".join(lines) + "\n")
    return path


def built(folder, name, tmp_path, **settings):
    config = {"data_path": str(folder), "checkpoint_dir": str(tmp_path / "saved"), "epochs": 1, **QUIET, **settings}
    config, model, loaders = prepare("CoSim", name, config_dict=config)
    return model, loaders[0]._dataset


def gram(model):
    F = model.F
    matrix = sp.csr_matrix((F.values.numpy(), F.indices.numpy(), F.indptr.numpy()), shape=tuple(F.shape))
    return (matrix @ matrix.T).toarray()


def test_field_weights_make_cosim_the_weighted_mean_of_per_field_cosines(tmp_path):
    folder = tmp_path / "data"
    two_field_data(folder)
    both, dataset = built(
        folder, "two", tmp_path, feature_fields=["words", "tags"], field_weights={"words": 1, "tags": 3}
    )
    words, _ = built(folder, "two", tmp_path, feature_fields=["words"])
    tags, _ = built(folder, "two", tmp_path, feature_fields=["tags"])
    np.testing.assert_allclose(gram(both), 0.25 * gram(words) + 0.75 * gram(tags), atol=1e-6)
    # unset: one L2 normalisation over the joined columns (the former behaviour), which is not that mean
    joint, _ = built(folder, "two", tmp_path, feature_fields=["words", "tags"])
    assert not np.allclose(gram(joint), 0.5 * gram(words) + 0.5 * gram(tags), atol=1e-3)


def test_field_weights_errors_name_the_setting(tmp_path):
    from recbole_fbsm.errors import ColdStartError

    folder = tmp_path / "data"
    two_field_data(folder)
    with pytest.raises(ColdStartError, match="field_weights names \\['title'\\]"):
        built(folder, "two", tmp_path, feature_fields=["words", "tags"], field_weights={"title": 1})
    with pytest.raises(ColdStartError, match="field_weights.*expected 'tags' to be a number >= 0"):
        built(folder, "two", tmp_path, feature_fields=["words", "tags"], field_weights={"tags": -1})


def test_a_dense_field_holding_the_sparse_rows_gives_the_same_similarities(tmp_path):
    """A float_seq field whose values are the words' weighted rows: the same F up to column order, so
    CoSim (and FBSM with the same D, V) score exactly as with the sparse field."""
    folder = tmp_path / "data"
    two_field_data(folder)
    sparse_model, dataset = built(folder, "two", tmp_path, feature_fields=["words"])
    F = sparse_model.F
    rows = sp.csr_matrix((F.values.numpy(), F.indices.numpy(), F.indptr.numpy()), shape=tuple(F.shape)).toarray()
    tokens = dataset.field2id_token["item_id"]
    dense = {str(tokens[i]): rows[i] for i in range(1, len(tokens))}
    dense_folder = tmp_path / "dense"
    two_field_data(dense_folder, dense=dense)
    dense_model, dense_dataset = built(dense_folder, "two", tmp_path, feature_fields=["emb"])
    assert dense_model.n_features == sparse_model.n_features
    # same items, same ids (same files but the extra column), same Gram matrix of the item features
    assert list(dense_dataset.field2id_token["item_id"]) == list(tokens)
    np.testing.assert_allclose(gram(dense_model), gram(sparse_model), atol=1e-6)
    # and beside a sparse field, with weights: the weighted mean again
    mixed, _ = built(dense_folder, "two", tmp_path, feature_fields=["emb", "tags"], field_weights={"emb": 2, "tags": 1})
    tags, _ = built(dense_folder, "two", tmp_path, feature_fields=["tags"])
    np.testing.assert_allclose(gram(mixed), (2 * gram(sparse_model) + gram(tags)) / 3, atol=1e-6)


def test_transform_weights_new_rows_like_training_with_fields_and_dense_columns(tmp_path):
    from recbole_fbsm.data.features import term_counts

    folder = tmp_path / "dense"
    rng = np.random.default_rng(0)
    two_field_data(folder, dense={f"i{i}": rng.normal(size=3) for i in range(80)})
    _, dataset = built(folder, "two", tmp_path, feature_fields=["words"])
    fields = ["words", "tags", "emb"]
    counts, _ = term_counts(dataset, fields)
    for weighting, shrink in (("tfidf", 0), ("tf", 0), ("binary", 0), ("bm25", 0), ("bm25", 1.5), ("tfidf", 0.5)):
        for weights in (None, {"words": 1, "tags": 2, "emb": 0.5}):
            features = build_item_features(
                dataset, dataset.split_items, fields, weighting, True, weights, bm25_k1=1.2, bm25_b=0.3, shrink=shrink
            )
            again = features.transform(counts[:, features.source_columns])
            np.testing.assert_allclose(again.toarray(), features.matrix.toarray(), atol=1e-12)
            emb = [k for k, name in enumerate(features.names) if name.startswith("emb:")]
            assert len(emb) == 3 and np.unique(np.sign(features.matrix[:, emb].data)).size == 2  # not binarised


def test_other_splits_text_cannot_move_training(tmp_path):
    """Editing a test item's text (a word no training item has, and removing a training word) leaves the
    trained parameters bit for bit the same: the vocabulary and everything the model starts from come
    from the training items only."""
    folder = tmp_path / "data"
    two_field_data(folder)
    settings = {
        "data_path": str(folder),
        "checkpoint_dir": str(tmp_path / "saved"),
        "epochs": 3,
        "rank": 3,
        "feature_fields": ["words"],
        "seed": 7,
        **QUIET,
    }
    _, _, (_, _, test_data) = prepare("FBSM", "two", config_dict=settings)
    test_items = test_data._dataset.split_items
    test_token = str(test_data._dataset.field2id_token["item_id"][test_items[0]])
    first = run("FBSM", "two", config_dict=settings)
    edited = tmp_path / "edited"
    two_field_data(edited, test_item_words={test_token: ["brand_new_word", "another_new_word"]})
    second = run("FBSM", "two", config_dict={**settings, "data_path": str(edited)})
    a = load_checkpoint(first["saved_model_file"])["state_dict"]
    b = load_checkpoint(second["saved_model_file"])["state_dict"]
    assert first["best_epoch"] == second["best_epoch"]
    for name in ("D", "V"):
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)


def test_bm25_and_row_shrink_follow_their_formulas_with_training_statistics_only(tmp_path):
    """BM25: tf (k1 + 1) / (tf + k1 (1 - b + b len / avglen)) x log(1 + (N - df + 0.5) / (df + 0.5)), with N,
    df and avglen over training items; the row shrink multiplies by sqrt(1 + s) / sqrt(||x||^2 + s m), m the
    training rows' mean squared norm. Checked against a dense brute force, per field with field weights."""
    from recbole_fbsm.data.features import term_counts

    folder = tmp_path / "data"
    two_field_data(folder)
    _, dataset = built(folder, "two", tmp_path, feature_fields=["words"])
    train = np.asarray(dataset.split_items)
    for fields, weights in ((["words"], None), (["words", "tags"], {"words": 1, "tags": 3})):
        counts, names = term_counts(dataset, fields)
        counts = counts.toarray()
        k1, b, s = 1.7, 0.4, 0.8
        features = build_item_features(dataset, train, fields, "bm25", True, weights, bm25_k1=k1, bm25_b=b, shrink=s)
        blocks = []
        for field in fields:
            columns = [c for c, name in enumerate(names) if name.startswith(field + ":")]
            x = counts[:, columns]
            seen = (x[train] > 0).sum(axis=0) > 0
            x = x[:, seen]
            df = (x[train] > 0).sum(axis=0)
            idf = np.log(1 + (len(train) - df + 0.5) / (df + 0.5))
            length = x.sum(axis=1, keepdims=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                tf = np.nan_to_num(x * (k1 + 1) / (x + k1 * (1 - b + b * length / length[train].mean())))
            w = tf * idf
            square = (w * w).sum(axis=1, keepdims=True)
            m = square[train][square[train] > 0].mean()
            scale = 1.0 if weights is None else np.sqrt(weights[field] / sum(weights.values()))
            blocks.append(w * scale * np.sqrt(1 + s) / np.sqrt(square + s * m) if weights else w)
        expected = np.hstack(blocks)
        if weights is None:
            square = (expected * expected).sum(axis=1, keepdims=True)
            m = square[train][square[train] > 0].mean()
            expected = expected * np.sqrt(1 + s) / np.sqrt(square + s * m)
        np.testing.assert_allclose(features.matrix.toarray(), expected, atol=1e-12)
        assert features.matrix.min() >= 0  # Lucene's idf: no negative weight even for a token in most items


def test_weighting_by_blocks_of_rows_changes_no_bit(tmp_path, monkeypatch):
    """The weighting works on blocks of whole rows (no copy of a large matrix): blocks of a few entries give
    bit for bit the matrix of one block, for every weighting, per-field scales, shrink and a dense field."""
    import recbole_fbsm.data.features as features_module

    folder = tmp_path / "dense"
    rng = np.random.default_rng(1)
    two_field_data(folder, dense={f"i{i}": rng.normal(size=3) for i in range(80)})
    _, dataset = built(folder, "two", tmp_path, feature_fields=["words"])
    whole_rows = features_module.row_chunks
    for weighting, shrink, weights in (
        ("tfidf", 0, None),
        ("bm25", 1.5, {"words": 1, "tags": 2, "emb": 0.5}),
        ("binary", 0.5, None),
        ("tf", 0, {"words": 1, "tags": 1, "emb": 3}),
    ):
        args = (dataset, dataset.split_items, ["words", "tags", "emb"], weighting, True, weights)
        one_block = build_item_features(*args, bm25_k1=1.2, bm25_b=0.3, shrink=shrink).matrix
        monkeypatch.setattr(features_module, "row_chunks", lambda indptr: whole_rows(indptr, entries_per_chunk=3))
        blocks = build_item_features(*args, bm25_k1=1.2, bm25_b=0.3, shrink=shrink).matrix
        monkeypatch.setattr(features_module, "row_chunks", whole_rows)
        assert len(whole_rows(one_block.indptr, entries_per_chunk=3)) > 10
        for name in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(blocks, name), getattr(one_block, name))


def test_column_selection_equals_scipy_indexing():
    from recbole_fbsm.data.features import select_columns

    matrix = sp.vstack([sp.csr_matrix((2, 40)), sp.random(50, 40, density=0.1, random_state=0), sp.csr_matrix((3, 40))])
    matrix = sp.csr_matrix(matrix)
    for columns in (
        np.random.default_rng(0).permutation(40)[:25],
        np.random.default_rng(1).permutation(40),
        np.array([], dtype=np.int64),
    ):
        expected = matrix[:, columns]
        expected.sort_indices()
        selected = select_columns(matrix, columns)
        assert selected.shape == expected.shape and selected.has_sorted_indices
        for name in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(selected, name), getattr(expected, name))


@pytest.mark.parametrize(
    "stop_words, dropped, kept",
    [
        ("english", {"of", "the"}, {"drama"}),
        (None, set(), {"of", "the", "drama"}),
        (["Drama", "of"], {"of", "drama"}, {"the"}),
    ],
)
def test_stop_words_are_no_features_of_a_field_no_analyzer_describes(tmp_path, monkeypatch, stop_words, dropped, kept):
    """ml-100k's titles and genres (no analyzer file): scikit-learn's English list by default, a list of one's own
    (case-insensitive), or none."""
    monkeypatch.chdir(tmp_path)
    _, model, _ = prepare("CoSim", "ml-100k", config_dict={"state": "ERROR", "stop_words": stop_words})
    tokens = {name.split(":", 1)[1].lower() for name in model.feature_names}
    assert not tokens & dropped and kept <= tokens


def test_the_artifact_replays_the_stop_words_on_new_text(tmp_path, monkeypatch):
    """A new film's title is analysed by the served model as in training: "of" is no feature, so "Space Cowboys of
    Mars" is the same row as "Space Cowboys Mars", and no explanation can rest on it."""
    from recbole_fbsm.quick_start import run
    from recbole_fbsm.serve import load_model, read_new_items

    monkeypatch.chdir(tmp_path)
    result = run("CoSim", "ml-100k", config_dict={"state": "ERROR", "checkpoint_dir": str(tmp_path / "saved")})
    served = load_model(result["artifact_file"])
    assert served.config["stop_words"] == "english"
    path = tmp_path / "new.csv"
    path.write_text("item_id,movie_title,class\nm1,Space Cowboys of Mars,Sci-Fi\nm2,Space Cowboys Mars,Sci-Fi\n")
    new = read_new_items(served, path, warn=False)
    rows = new.matrix.toarray()
    assert rows[0].any() and (rows[0] == rows[1]).all()
    assert not any(name.lower().endswith(":of") for name in served.features.names)
