"""Serving trained models on brand-new items: recommend, explain, interactions, per-user comparison.

One small implicit dataset with a planted signal is generated per module: users of topic k like items
whose words contain ``t{k}``; a few items of every topic are held out of the dataset entirely and come
back as new items. FBSM, UFSM, CoSim and BPR are trained on it once (1-3 epochs).
"""

import csv
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import HEADER, planted_settings, score_new_items, train_planted, write_items_as_new
from recbole.data.interaction import Interaction

from recbole_fbsm.cli.serve import serve as main
from recbole_fbsm.data.features import build_item_features, term_counts
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.quick_start import prepare, run
from recbole_fbsm.serve import (
    UnknownTokensWarning,
    compare_users,
    explain,
    load_model,
    per_user_recall,
    read_new_items,
    recommend,
    strongest_interactions,
)
from recbole_fbsm.serve.interactions import top_pairs
from recbole_fbsm.training.trainer import get_trainer


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    settings = {
        # an epoch is kept, not the untrained start: interactions are listed only for a learned V (test_kept_start.py)
        "FBSM": {"epochs": 3, "rank": 3, "init_std": 0.1, "learning_rate": 0.05, "valid_before_training": False},
        "UFSM": {"epochs": 2, "n_functions": 2, "init_std": 0.3, "learning_rate": 0.05},
        "CoSim": {},
        "BPR": {"epochs": 1},
    }
    data, results = train_planted(tmp_path_factory.mktemp("serve"), settings)
    data["results"] = results
    data["checkpoint"] = {name: result["saved_model_file"] for name, result in results.items()}
    data["artifact"] = {name: result.get("artifact_file") for name, result in results.items()}
    data["common"] = planted_settings(data["root"])
    return data


@pytest.fixture(scope="module")
def served(trained):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = load_model(trained["artifact"][name])
        return cache[name]

    return get


def all_users(model):
    return torch.arange(1, model.R.shape[0])


def dense(csr):
    return csr.to_torch_sparse().to_dense().double().numpy()


def write_item_file(path, rows, header=HEADER):
    path.write_text(header + "".join(rows))
    return path


# ------------------------------------------------------------------------------------- feature weighting
def test_transform_weights_counts_exactly_as_training(trained):
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(trained["root"])
        _, _, (train_data, _, _) = prepare("FBSM", trained["name"], config_dict=trained["common"])
    dataset = train_data._dataset
    fields = ["genre", "words"]
    counts, _ = term_counts(dataset, fields)
    for weighting in ("tfidf", "tf", "binary"):
        for normalize in (True, False):
            features = build_item_features(dataset, dataset.split_items, fields, weighting, normalize)
            again = features.transform(counts[:, features.source_columns])
            assert again.shape == features.matrix.shape
            assert (again != features.matrix).nnz == 0, (weighting, normalize)


def test_new_item_rows_are_weighted_like_training_and_scored_by_brute_force(trained, served, tmp_path):
    """The default features by hand: BM25 (k1, b; idf, document frequencies and each field's average length
    from training items only; zero for tokens no training item has), rows times sqrt(1 + s) / sqrt(||x||^2 + s m)
    with m the training rows' mean squared norm; then score(u, new) = sum over u's training likes j of
    f_new^T (diag(D) + V V^T) f_j."""
    s = served("FBSM")
    config = s.config
    k1, b, shrink = config["bm25_k1"], config["bm25_b"], config["feature_shrink"]
    assert config["feature_weighting"] == "bm25" and shrink > 0
    train_tokens = sorted(set(s.item_tokens(s.training_items())))
    test_item = s.item_tokens(s.split_items("test")[:1])[0]

    def bag(feats):
        return Counter({f"genre:{feats['genre']}": 1, **Counter(f"words:{w}" for w in feats["words"])})

    training_bags = [bag(trained["features"][token]) for token in train_tokens]
    document_frequency = Counter(name for counts in training_bags for name in counts)
    vocabulary = set(document_frequency)
    n_train = len(train_tokens)
    fields = ("genre", "words")
    average = {
        f: sum(c for counts in training_bags for n, c in counts.items() if n.startswith(f + ":")) / n_train
        for f in fields
    }

    def bm25(counts):
        known = {n: c for n, c in counts.items() if n in vocabulary}
        length = {f: sum(c for n, c in known.items() if n.startswith(f + ":")) for f in fields}
        weights = {}
        for name, c in known.items():
            field, df = name.split(":")[0], document_frequency[name]
            idf = math.log(1 + (n_train - df + 0.5) / (df + 0.5))
            weights[name] = c * (k1 + 1) / (c + k1 * (1 - b + b * length[field] / average[field])) * idf
        return weights

    squares = [sum(v * v for v in bm25(counts).values()) for counts in training_bags]
    mean_square = np.mean([q for q in squares if q > 0])
    new_tokens = Counter(
        {"genre:g2": 1, "words:t1": 2, "words:n3": 1, "words:n4": 1, f"words:x_{test_item}": 1, "words:zzz": 1}
    )
    path = write_item_file(tmp_path / "one.item", [f"brand_new\tg2\tt1 n3 t1 n4 x_{test_item} zzz\n"])
    with pytest.warns(UnknownTokensWarning):
        new = read_new_items(s, path)
    expected = bm25(new_tokens)
    norm = math.sqrt(sum(v * v for v in expected.values()) + shrink * mean_square)
    row = new.matrix[0]
    got = {s.features.names[c]: v for c, v in zip(row.indices, row.data)}
    assert set(got) == set(expected) and f"words:x_{test_item}" not in got
    for name, value in expected.items():
        assert got[name] == pytest.approx(value * math.sqrt(1 + shrink) / norm, rel=1e-9)

    model = s.model
    F, likes = dense(model.F), dense(model.R)
    V = model.V.double().numpy()
    W = np.diag(model.D.double().numpy()) + V @ V.T
    f_new = np.zeros(model.n_features)
    f_new[row.indices] = row.data
    users = all_users(model)
    brute = np.array([sum(f_new @ W @ F[j] for j in np.flatnonzero(likes[u])) for u in users.tolist()])
    scores = score_new_items(s, new, users)[:, 0].double().numpy()
    np.testing.assert_allclose(scores, brute, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["FBSM", "UFSM", "CoSim"])
def test_copies_of_dataset_items_score_as_the_model_scores_the_originals(trained, served, name, tmp_path):
    """A dataset item written out under a new id scores exactly as the model scores the item itself for
    every user who did not like it in training; the top lists follow the scores."""
    s = served(name)
    model = s.model
    picked = s.item_tokens(np.r_[s.training_items()[:6], s.split_items("test")[:6]])
    path = tmp_path / "copies.item"
    new_ids = write_items_as_new(trained["item_file"], path, picked, prefix="copy_")
    assert len(new_ids) == len(picked)
    new = read_new_items(s, path, warn=False)
    # every token of a copy is in the vocabulary; a test item's own word x_<item> has no training weight
    assert not new.unknown and new.weightless == Counter({f"words:x_{t}": 1 for t in picked[6:]})
    users = all_users(model)
    scores = score_new_items(s, new, users).double()
    originals = s.item_ids([t[len("copy_") :] for t in new.tokens])
    full = model.full_sort_predict(Interaction({"user_id": users})).view(len(users), -1)[:, originals].double()
    liked = torch.as_tensor(dense(model.R)[1:][:, originals.numpy()] > 0)
    assert (~liked).sum() > 100
    torch.testing.assert_close(scores[~liked], full[~liked], rtol=1e-5, atol=1e-5)

    result = recommend(s, new, top=5)
    has_likes = torch.as_tensor(dense(model.R)[1:].sum(1) > 0)
    for column, token in enumerate(new.tokens):
        rows = result.for_items[result.for_items["item_id"] == token]
        assert list(rows["rank"]) == [1, 2, 3, 4, 5]
        best = torch.sort(scores[has_likes, column], descending=True).values[:5].numpy()
        np.testing.assert_allclose(rows["score"].to_numpy(), best, rtol=1e-6, atol=1e-6)
        for user, score in zip(rows["user_id"], rows["score"]):
            assert scores[s.user_ids([user])[0] - 1, column].item() == pytest.approx(score, abs=1e-6)
    first_user = result.for_users[result.for_users["user_id"] == s.user_tokens([1])[0]]
    np.testing.assert_allclose(
        first_user["score"].to_numpy(), torch.sort(scores[0], descending=True).values[:5].numpy(), rtol=1e-6
    )


# --------------------------------------------------------------------------------------------- bad input
def test_bad_new_item_files_give_errors_naming_file_and_field(trained, served, tmp_path):
    s = served("FBSM")
    existing = trained["likes"][0][1]
    cases = {
        "collision.item": (
            HEADER + f"fresh\tg1\tt0\n{existing}\tg1\tt0 n1\n",
            rf"collision\.item: 1 item id\(s\) already belong to items of dataset 'plant': '{existing}'",
        ),
        "missing.item": (
            "item_id:token\tgenre:token\nfresh\tg1\n",
            r"missing\.item lacks the feature column\(s\) \['words:token_seq'\] the model reads: its header has "
            r"\['item_id:token', 'genre:token'\]",
        ),
        "empty.item": ("", r"empty\.item: the file is empty or its first line is blank"),
        "header_only.item": (HEADER, r"header_only\.item has a header but no item rows"),
        "twice.item": (
            HEADER + "a1\tg1\tt0\na1\tg2\tt1\n",
            r"twice\.item: item_id 'a1' is on 2 lines \(line 2, line 3\)",
        ),
        "wrong_type.item": (
            "item_id:token\tgenre:token\twords:token\nfresh\tg1\tt0\n",
            r"wrong_type\.item lacks the feature column\(s\) \['words:token_seq'\] .*'words:token'\]",
        ),
        "no_id.item": (
            "name:token\tgenre:token\twords:token_seq\nfresh\tg1\tt0\n",
            r"no_id\.item has no item id column 'item_id'",
        ),
    }
    for file_name, (content, message) in cases.items():
        path = tmp_path / file_name
        path.write_text(content)
        with pytest.raises(ColdStartError, match=message):
            read_new_items(s, path)
    with pytest.raises(ColdStartError, match=r"new-item file .*absent\.item not found"):
        read_new_items(s, tmp_path / "absent.item")
    with_bom = tmp_path / "bom.item"
    with_bom.write_bytes(("\ufeff" + HEADER + "fresh\tg1\tt0\n").encode("utf-8"))
    with pytest.raises(ColdStartError, match=r"bom\.item line 1: the file starts with a byte order mark"):
        read_new_items(s, with_bom)  # refused as the training reader refuses it
    latin = tmp_path / "latin1.item"
    latin.write_bytes((HEADER + "caf\xe9\tg1\tt0\n").encode("latin-1"))
    with pytest.raises(
        ColdStartError, match=r"latin1\.item line 2: not utf-8 text \(.* at byte 0xe9\); save the file as utf-8"
    ):
        read_new_items(s, latin)


def test_new_items_called_na_or_null_keep_their_ids(trained, served, tmp_path):
    """pandas' default missing values (NA, null, ...) are ids and tokens in a new-item file, as in training."""
    s = served("FBSM")
    feats = trained["features"][s.item_tokens(s.training_items()[:1])[0]]
    words = " ".join(feats["words"])
    path = write_item_file(
        tmp_path / "na.item", [f"NA\t{feats['genre']}\t{words}\n", f"null\t{feats['genre']}\t{words}\n"]
    )
    new = read_new_items(s, path, warn=False)
    assert new.tokens == ["NA", "null"]
    assert (new.matrix[0] != new.matrix[1]).nnz == 0 and new.matrix[0].nnz > 0


def test_unknown_tokens_are_ignored_and_counted_in_a_warning(trained, served, tmp_path):
    s = served("FBSM")
    train_item = s.item_tokens(s.training_items()[:1])[0]
    test_item = s.item_tokens(s.split_items("test")[:1])[0]
    feats = trained["features"][train_item]
    words = " ".join(feats["words"])
    path = write_item_file(
        tmp_path / "noisy.item",
        [
            f"plain\t{feats['genre']}\t{words}\n",
            f"noisy\t{feats['genre']}\tzz1 {words} the zz1 zz2 Of x_{test_item}\n",  # stop words: no warning
            "nothing\tgz\tzz3\n",
        ],
    )
    with pytest.warns(UnknownTokensWarning) as record:
        new = read_new_items(s, path)
    message = str(record[0].message)
    assert "noisy.item: 6 feature token occurrence(s) unknown to the trained model were ignored" in message
    assert "5 occurrence(s) of 4 token(s) not in the training vocabulary" in message
    assert "1 occurrence(s) of 1 token(s) that no training item has" in message
    assert "1 new item(s) have no known feature left and score 0 for every user" in message and "'nothing'" in message
    assert new.unknown == Counter({"words:zz1": 2, "words:zz2": 1, "words:zz3": 1, "genre:gz": 1})
    assert new.weightless == Counter({f"words:x_{test_item}": 1})
    assert new.n_ignored == 6 and new.featureless == ["nothing"]
    assert (new.matrix[0] != new.matrix[1]).nnz == 0  # the ignored tokens change nothing, not even the norm
    scores = score_new_items(s, new, all_users(s.model))
    torch.testing.assert_close(scores[:, 0], scores[:, 1])
    assert bool((scores[:, 2] == 0).all())


def test_a_checkpoint_of_another_model_is_refused(trained, tmp_path, capsys):
    bpr = trained["checkpoint"]["BPR"]
    assert trained["artifact"]["BPR"] is None  # a model of ids alone makes no artifact
    with pytest.raises(ColdStartError, match=r"is a BPR model; expected one of FBSM, UFSM, CoSim"):
        load_model(bpr)
    code = main(["recommend", bpr, str(trained["new_file"])])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("error: model ") and "is a BPR model" in err and "Traceback" not in err
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    assert main(["interactions", str(tmp_path / "junk.pth")]) == 2
    err = capsys.readouterr().err
    assert "junk.pth is not a file of recbole-fbsm (safetensors)" in err and "Traceback" not in err
    artifact = trained["artifact"]["FBSM"]
    cut_short = tmp_path / "cut.fbsm"
    cut_short.write_bytes(Path(artifact).read_bytes()[:-100])  # an interrupted copy
    assert main(["interactions", str(cut_short)]) == 2
    assert "cut.fbsm is not a file of recbole-fbsm (safetensors)" in capsys.readouterr().err


def test_cli_bad_new_items_and_bad_output_exit_2(trained, tmp_path, capsys):
    checkpoint, new_file = trained["checkpoint"]["CoSim"], str(trained["new_file"])
    existing = write_item_file(tmp_path / "clash.item", [f"{trained['likes'][0][1]}\tg1\tt0\n"])
    assert main(["recommend", checkpoint, str(existing), "--item-output", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: new-item file ") and "clash.item" in err and "already belong" in err
    assert not (tmp_path / "o.csv").exists()
    assert main(["recommend", checkpoint, new_file, "--item-output", str(tmp_path / "o.txt")]) == 2
    assert "cannot tell the format from its extension '.txt'" in capsys.readouterr().err
    assert main(["recommend", checkpoint, new_file, "--users", "nobody", "--user-output", str(tmp_path / "u.csv")]) == 2
    assert "1 user(s) not in dataset 'plant'" in capsys.readouterr().err
    (tmp_path / "a_file").write_text("")
    unwritable = tmp_path / "a_file" / "o.csv"  # its folder would have to be a file
    assert main(["recommend", checkpoint, new_file, "--item-output", str(unwritable)]) == 2
    assert f"output file {unwritable} cannot be written" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ explain
@pytest.mark.parametrize("name", ["FBSM", "UFSM", "CoSim"])
def test_explanations_add_up_to_the_model_score(trained, served, name):
    s = served(name)
    model = s.model
    F, likes = dense(model.F), dense(model.R)
    test_items = s.split_items("test")
    new = read_new_items(s, trained["new_file"], warn=False)
    checked = shared_somewhere = 0
    for u in (1, 7, 15, 28):
        user = s.user_tokens([u])[0]
        liked = np.flatnonzero(likes[u])
        unliked_train = [i for i in s.training_items() if likes[u, i] == 0]
        for item_id, constraint in (
            (liked[0], True),
            (unliked_train[0], False),
            (test_items[u % len(test_items)], False),
        ):
            item = s.item_tokens([item_id])[0]
            explanation = explain(s, user, item)
            interaction = Interaction({"user_id": torch.tensor([u]), "item_id": torch.tensor([int(item_id)])})
            predicted = model.predict(interaction).item()
            assert explanation.estimation_constraint is constraint
            assert explanation.model_score == pytest.approx(predicted, abs=1e-6)
            assert explanation.score == pytest.approx(predicted, abs=1e-5)
            assert explanation.items["similarity"].sum() == pytest.approx(predicted, abs=1e-5)
            others = [j for j in liked if j != item_id]
            assert sorted(explanation.items["item_id"]) == sorted(s.item_tokens(others))
            assert set(explanation.parts()) == ({"diagonal", "low_rank"} if name == "FBSM" else {"diagonal"})
            if name == "FBSM":  # each part is what its parameter contributes
                profile = likes[u] @ F - (F[item_id] if constraint else 0)
                V = model.V.double().numpy()
                assert explanation.parts()["diagonal"] == pytest.approx(
                    F[item_id] @ (model.D.double().numpy() * profile), abs=1e-6
                )
                assert explanation.parts()["low_rank"] == pytest.approx((F[item_id] @ V) @ (V.T @ profile), abs=1e-6)
                # the low-rank part holds the p = q terms too: one per feature that both sides share
                low_rank = explanation.part("low_rank")
                same = set(low_rank.loc[low_rank["item_feature"] == low_rank["user_feature"], "item_feature"])
                assert same == set(explanation.part("diagonal")["item_feature"])
                shared_somewhere += bool(same)
            checked += 1
        explanation = explain(s, user, new.tokens[u % len(new)], new_items=new)
        expected = score_new_items(s, new, torch.tensor([u]))[0, u % len(new)].item()
        assert explanation.new_item and not explanation.estimation_constraint
        assert explanation.model_score == pytest.approx(expected, abs=1e-6)
        assert explanation.score == pytest.approx(expected, abs=1e-5)
        assert explanation.items["similarity"].sum() == pytest.approx(expected, abs=1e-5)
    assert checked == 12
    assert name != "FBSM" or shared_somewhere >= 4


def test_explain_cli_json_shows_top_entries_and_the_rest(trained, tmp_path, capsys):
    user, item = "u0_0", trained["held_out"][0]
    out = tmp_path / "why.json"
    command = ["explain", trained["checkpoint"]["FBSM"], "--user", user, "--item", item, "--top", "3"]
    assert main([*command, "--new-items", str(trained["new_file"]), "--output", str(out)]) == 0
    assert "warning: new-item file" in capsys.readouterr().err
    document = json.loads(out.read_text())
    total = sum(part["total"] for part in document["features"].values())
    assert total == pytest.approx(document["score"], abs=1e-5)
    assert document["items"]["total"] == pytest.approx(document["score"], abs=1e-5)
    assert all(len(part["top"]) <= 3 for part in document["features"].values())
    table = tmp_path / "why.csv"
    assert main([*command, "--new-items", str(trained["new_file"]), "--output", str(table)]) == 0
    rows = list(csv.DictReader(table.open()))
    features = sum(float(r["contribution"]) for r in rows if r["section"] == "feature")
    assert features == pytest.approx(document["score"], abs=1e-4)
    assert main(["explain", trained["checkpoint"]["FBSM"], "--user", user, "--item", item]) == 2
    assert "is not an item of dataset 'plant'; for a new item give the new-item file" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- interactions
def test_top_pairs_blockwise_equal_a_dense_computation():
    generator = torch.Generator().manual_seed(0)
    V = torch.randn(37, 3, generator=generator, dtype=torch.float64)
    dense_matrix = (V @ V.T).numpy()
    p, q = np.triu_indices(37, k=1)
    values = dense_matrix[p, q]
    for k in (1, 7, 10_000):
        (pos, pos_p, pos_q), (neg, neg_p, neg_q) = top_pairs(V, k, cells=4 * 37)  # blocks of 4 rows
        expected_pos = np.sort(values[values > 0])[::-1][:k]
        expected_neg = np.sort(values[values < 0])[:k]
        np.testing.assert_allclose(pos.numpy(), expected_pos)
        np.testing.assert_allclose(neg.numpy(), expected_neg)
        assert bool((pos_p < pos_q).all()) and bool((neg_p < neg_q).all())
        np.testing.assert_allclose(dense_matrix[pos_p.numpy(), pos_q.numpy()], pos.numpy())
        np.testing.assert_allclose(dense_matrix[neg_p.numpy(), neg_q.numpy()], neg.numpy())


@pytest.mark.parametrize("min_items", [0, 2])
def test_strongest_interactions_equal_a_dense_brute_force(served, min_items):
    s = served("FBSM")
    names = np.asarray(s.features.names)
    keep = np.flatnonzero(s.training_item_frequency >= min_items)
    D, V = s.model.D.double().numpy()[keep], s.model.V.double().numpy()[keep]
    W = np.diag(D) + V @ V.T  # the test may build it; the code may not
    table = strongest_interactions(s, top=6, min_items=min_items, cells=5 * len(keep))
    p, q = np.triu_indices(len(keep), k=1)
    off = W[p, q]
    for kind, order in (("positive", np.argsort(-off, kind="stable")), ("negative", np.argsort(off, kind="stable"))):
        rows = table[table["kind"] == kind]
        chosen = order[:6]
        np.testing.assert_allclose(rows["weight"].to_numpy(), off[chosen], rtol=1e-9)
        assert {frozenset(pair) for pair in zip(rows["feature_p"], rows["feature_q"])} == {
            frozenset((names[keep][a], names[keep][b])) for a, b in zip(p[chosen], q[chosen])
        }
    diagonal = np.diag(W)
    top = table[table["kind"] == "diagonal_top"]
    np.testing.assert_allclose(top["weight"].to_numpy(), np.sort(diagonal)[::-1][:6], rtol=1e-9)
    np.testing.assert_allclose((top["D_p"] + top["vv"]).to_numpy(), top["weight"].to_numpy(), rtol=1e-9)
    bottom = table[table["kind"] == "diagonal_bottom"]
    np.testing.assert_allclose(bottom["weight"].to_numpy(), np.sort(diagonal)[:6], rtol=1e-9)
    assert (table["items_p"] >= min_items).all() and (table["items_q"] >= min_items).all()
    if min_items:
        assert len(keep) < len(names)


def test_interactions_are_fbsms_only(trained, served, tmp_path, capsys):
    with pytest.raises(ColdStartError, match=r"this is a UFSM model, whose similarity has no cross-feature terms"):
        strongest_interactions(served("UFSM"))
    assert main(["interactions", trained["checkpoint"]["CoSim"]]) == 2
    assert "error: model " in capsys.readouterr().err
    out = tmp_path / "pairs.json"
    assert main(["interactions", trained["checkpoint"]["FBSM"], "--top", "4", "--min-items", "1", "-o", str(out)]) == 0
    rows = json.loads(out.read_text())  # the table's rows
    kinds = Counter(row["kind"] for row in rows)
    assert set(kinds) == {"positive", "negative", "diagonal_top", "diagonal_bottom"} and max(kinds.values()) <= 4


# -------------------------------------------------------------------------------------------- round trip
def test_round_trip_held_out_items_reach_the_users_of_their_topic(trained, served, tmp_path, capsys):
    """Items held out of the dataset entirely, served as new items by the CLI: their topic's users
    come first, far above chance (a quarter of the users share an item's topic)."""
    items_out, users_out = tmp_path / "items.csv", tmp_path / "users.json"
    command = ["recommend", trained["checkpoint"]["FBSM"], str(trained["new_file"]), "--top", "10"]
    code = main([*command, "--item-output", str(items_out), "--user-output", str(users_out)])
    err = capsys.readouterr().err
    assert code == 0, err
    held_out = trained["held_out"]
    # each held-out item's own word x_<item> is unknown to the model
    assert f"{len(held_out)} occurrence(s) of {len(held_out)} token(s) not in the training vocabulary" in err
    topic_of, users_of_topic = trained["topic_of"], trained["users_of_topic"]
    rows = list(csv.DictReader(items_out.open()))
    assert len(rows) == 10 * len(held_out)
    hits = [users_of_topic[topic_of[r["item_id"]]].count(r["user_id"]) for r in rows]
    assert np.mean(hits) > 0.5, np.mean(hits)  # chance: 0.25

    rows = json.loads(users_out.read_text())  # the table's rows: user_id, rank, item_id, score
    s = served("FBSM")
    lists = {}
    for row in rows:
        lists.setdefault(row["user_id"], []).append(row)
    assert len(lists) == int((dense(s.model.R).sum(1) > 0).sum())
    for entries in lists.values():
        assert [e["rank"] for e in entries] == list(range(1, len(entries) + 1))
        assert [e["score"] for e in entries] == sorted((e["score"] for e in entries), reverse=True)
    first = [topic_of[entries[0]["item_id"]] == int(user[1]) for user, entries in lists.items()]
    assert np.mean(first) > 0.75, np.mean(first)  # chance: 0.25

    # ranks over all users: true users above random users on average
    new = read_new_items(s, trained["new_file"], warn=False)
    users = all_users(s.model)
    scores = score_new_items(s, new, users).numpy()
    tokens = s.user_tokens(users.numpy())
    ranks = scores.argsort(0).argsort(0)  # 0 = lowest
    true_rank, other_rank = [], []
    for column, item in enumerate(new.tokens):
        mine = np.array([t in users_of_topic[topic_of[item]] for t in tokens])
        true_rank.append(ranks[mine, column].mean())
        other_rank.append(ranks[~mine, column].mean())
    assert np.mean(true_rank) > np.mean(other_rank) + 0.3 * len(users)


# ------------------------------------------------------------------------------------ per-user comparison
def test_compare_users_groups_add_up_and_follow_the_per_user_recalls(trained, served, tmp_path):
    a, b = served("FBSM"), served("CoSim")
    comparison = compare_users(a, b, k=10)
    test_like_users, test_like_items = a.split_likes("test")
    test_users = np.unique(test_like_users)
    per_user = comparison.per_user
    assert sorted(per_user["user_id"]) == sorted(a.user_tokens(test_users))
    groups = comparison.groups.set_index("group")
    assert groups.loc[["better", "same", "worse"], "users"].sum() == len(test_users) == groups.loc["all", "users"]
    for group, rule in (
        ("better", per_user["recall_a"] > per_user["recall_b"]),
        ("same", per_user["recall_a"] == per_user["recall_b"]),
        ("worse", per_user["recall_a"] < per_user["recall_b"]),
    ):
        assert set(per_user.loc[rule, "user_id"]) == set(per_user.loc[per_user["group"] == group, "user_id"])
        assert groups.loc[group, "users"] == rule.sum()
    np.testing.assert_allclose(per_user["recall_a"], per_user["hits_a"] / per_user["test_likes"])
    # the per-user recalls are the trainer's own test evaluation, user by user
    for name, column in (("FBSM", "recall_a"), ("CoSim", "recall_b")):
        assert per_user[column].mean() == pytest.approx(trained["results"][name]["test_result"]["recall@10"], abs=1e-4)
    # distinct test items and likes per user / per item, recomputed from the test likes
    like_users = a.user_tokens(test_like_users)
    like_items = a.item_tokens(test_like_items)
    for group in ("better", "same", "worse", "all"):
        members = set(per_user["user_id"] if group == "all" else per_user.loc[per_user["group"] == group, "user_id"])
        liked = [(u, i) for u, i in zip(like_users, like_items) if u in members]
        items = {i for _, i in liked}
        assert groups.loc[group, "test_items"] == len(items)
        if members:
            assert groups.loc[group, "likes_per_user"] == pytest.approx(len(liked) / len(members))
            assert groups.loc[group, "likes_per_item"] == pytest.approx(len(liked) / len(items))
    # the CLI writes the same table
    table, users_file = tmp_path / "groups.csv", tmp_path / "users.csv"
    models = trained["checkpoint"]["FBSM"], trained["checkpoint"]["CoSim"]
    assert main(["compare-users", *models, "-o", str(table), "--per-user", str(users_file)]) == 0
    written = {r["group"]: int(r["users"]) for r in csv.DictReader(table.open())}
    assert written == {g: int(n) for g, n in groups["users"].items()}
    assert len(list(csv.DictReader(users_file.open()))) == len(test_users)


def test_compare_users_refuses_checkpoints_of_different_splits(trained, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    other = run("CoSim", trained["name"], config_dict={**trained["common"], "split_seed": 7})["saved_model_file"]
    with pytest.raises(ColdStartError, match=r"not trained on the same split: their test splits differ \("):
        compare_users(trained["checkpoint"]["FBSM"], other)
    assert main(["compare-users", trained["checkpoint"]["FBSM"], other]) == 2
    assert capsys.readouterr().err.startswith("error: models ")


def test_per_user_recall_breaks_ties_as_the_trainer_does(trained, tmp_path, monkeypatch):
    """With every score tied (a UFSM whose mixture weights are zero), the per-user recalls still
    average to the trainer's own test evaluation: the same candidates and the same random tie breaking
    (never the internal id order, which follows popularity)."""
    monkeypatch.chdir(tmp_path)  # the trainer opens ./log_tensorboard
    s = load_model(trained["artifact"]["UFSM"])
    s.model.M.zero_()
    config, model, (_, _, test_data) = prepare(
        "UFSM", trained["name"], config_dict={**trained["common"], "n_functions": 2}
    )
    model.load_state_dict(s.model.state_dict())
    trainer = get_trainer(config["MODEL_TYPE"], "UFSM")(config, model)
    expected = trainer.evaluate(test_data, load_best_model=False)["recall@10"]
    recalls = per_user_recall(s, k=10)
    assert recalls["recall"].mean() == pytest.approx(expected, abs=1e-4)
    n_candidates = len(s.split_items("test"))
    assert recalls["recall"].mean() == pytest.approx(10 / n_candidates, abs=0.15)  # chance level


def test_moved_data_is_found_with_data_path(trained, tmp_path):
    import shutil

    shutil.copytree(trained["root"] / trained["name"], tmp_path / trained["name"])
    moved = load_model(trained["checkpoint"]["CoSim"], data_path=tmp_path)
    assert moved.config["data_path"] == str(tmp_path / trained["name"])
    assert moved.features.names == load_model(trained["checkpoint"]["CoSim"]).features.names
    with pytest.raises(
        ColdStartError, match=r"cannot be loaded: dataset 'plant': folder .*nowhere.* not found.*--data-path"
    ):
        load_model(trained["checkpoint"]["CoSim"], data_path=tmp_path / "nowhere")


@pytest.mark.parametrize("device", ["bogus", "cuda:7"])
def test_a_device_this_machine_lacks_is_one_error_line(tmp_path, capsys, device):
    """torch's answer was a traceback (RuntimeError for a misspelled device, AssertionError without CUDA); the
    device is checked before the model file is read."""
    import re

    if device == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has eight GPUs")
    assert main(["recommend", str(tmp_path / "absent.fbsm"), str(tmp_path / "new.item"), "--device", device]) == 2
    err = capsys.readouterr().err
    message = rf"device '{device}' \(--device\): torch cannot use it here \(.+\)\."
    assert "Traceback" not in err and re.fullmatch("error: " + message, err.strip()), err
