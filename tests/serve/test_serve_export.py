"""serve export-likes writes the artifact's own id fields, so that its files load as a RecBole dataset with the
settings the model was trained with (a dataset whose ids are not named user_id / item_id)."""

import contextlib
import os

import numpy as np
import pytest
from helpers import planted_settings, write_planted

from recbole_fbsm.cli.serve import serve as serve_main
from recbole_fbsm.data import create_dataset
from recbole_fbsm.quick_start import run
from recbole_fbsm.serve.loading import checkpoint_config, load_model
from recbole_fbsm.serve.store import StoredItem, default_store_path, open_store


@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    """A CoSim artifact of the planted data with the id fields renamed ``reader`` and ``paper``."""
    root = tmp_path_factory.mktemp("export")
    data = write_planted(root)
    for path in (data["item_file"], data["item_file"].with_suffix(".inter")):
        text = path.read_text()
        path.write_text(text.replace("user_id:token", "reader:token").replace("item_id:token", "paper:token"))
    settings = {
        **planted_settings(root),
        "USER_ID_FIELD": "reader",
        "ITEM_ID_FIELD": "paper",
        "load_col": {"inter": ["reader", "paper"], "item": ["paper", "genre", "words"]},
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        artifact = run("CoSim", data["name"], config_dict=settings)["artifact_file"]
    return {"artifact": artifact, "data": data}


def test_exported_likes_and_items_load_as_a_dataset_with_the_model_s_settings(renamed, tmp_path, capsys):
    data = renamed["data"]
    store_path = default_store_path(renamed["artifact"])
    store = open_store(store_path)
    fresh = data["held_out"][:2]
    try:
        store.put_items(
            [
                StoredItem(
                    t, False, {"genre": data["features"][t]["genre"], "words": " ".join(data["features"][t]["words"])}
                )
                for t in fresh
            ]
        )
        store.add_likes("u0_0", [fresh[0], "k1i00"])
        store.add_likes("newcomer", [fresh[1]])
    finally:
        store.close()
    out = tmp_path / "more"
    assert serve_main(["export-likes", store_path, "-o", str(out)]) in (0, None), capsys.readouterr().err
    # the headers are the dataset's own: the rows append to its files, and the model's settings read the result
    plus = tmp_path / "plus"
    plus.mkdir()
    for suffix in ("inter", "item"):
        original = (data["item_file"].parent / f"{data['name']}.{suffix}").read_text().splitlines()
        exported = (out / f"more.{suffix}").read_text().splitlines()
        assert exported[0] == original[0]
        (plus / f"plus.{suffix}").write_text("\n".join(original + exported[1:]) + "\n")
    served = load_model(renamed["artifact"])
    config = checkpoint_config({**served.config, "dataset": "plus"}, data_path=tmp_path)
    dataset = create_dataset(config)
    pairs = set(
        zip(
            dataset.field2id_token["reader"][dataset.inter_feat["reader"].to_numpy()],
            dataset.field2id_token["paper"][dataset.inter_feat["paper"].to_numpy()],
        )
    )
    assert {("u0_0", fresh[0]), ("u0_0", "k1i00"), ("newcomer", fresh[1])} <= pairs
    assert len(pairs) == len(data["likes"]) + 3
    words = dataset.field2id_token["words"]
    for token in fresh:
        row = np.asarray(dataset.item_feat["words"][dataset.field2token_id["paper"][token]])
        assert sorted(words[row[row > 0]]) == sorted(data["features"][token]["words"])


def test_export_without_the_model_is_one_error_line(renamed, tmp_path, capsys):
    store_path = str(tmp_path / "elsewhere.sqlite")
    open_store(store_path).close()
    assert serve_main(["export-likes", store_path, "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: store {store_path}: the model it served is needed") and "--model" in err[-1]


def _filled_store(path, data, cells=None):
    """A store at ``path`` with one new item (``cells``: its feature texts) and two likes."""
    fresh = data["held_out"][0]
    cells = cells or {"genre": data["features"][fresh]["genre"], "words": " ".join(data["features"][fresh]["words"])}
    with contextlib.closing(open_store(str(path))) as store:
        store.put_items([StoredItem(fresh, False, cells)])
        store.add_likes("u0_0", [fresh, "k1i00"])
    return str(path)


def _one_error_line(capsys, *expected):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and all(text in err for text in expected), err


def test_export_into_a_dataset_folder_or_over_a_file_is_refused_and_changes_nothing(renamed, tmp_path, capsys):
    data = renamed["data"]
    store = _filled_store(tmp_path / "s.sqlite", data)
    folder = data["item_file"].parent  # the dataset's own folder: NAME.inter and NAME.item are there
    before = {path: path.read_bytes() for path in folder.iterdir()}
    assert serve_main(["export-likes", store, "--model", renamed["artifact"], "-o", str(folder)]) == 2
    _one_error_line(capsys, f"{data['name']}.i", "export-likes never replaces a file nor writes beside a dataset")
    assert {path: path.read_bytes() for path in folder.iterdir()} == before
    (tmp_path / "link").symlink_to(folder)  # the dataset's folder under another name
    assert serve_main(["export-likes", store, "--model", renamed["artifact"], "-o", str(tmp_path / "link")]) == 2
    _one_error_line(capsys, f"{data['name']}.i", "writes beside a dataset")
    assert {path: path.read_bytes() for path in folder.iterdir()} == before
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    assert serve_main(["export-likes", store, "--model", renamed["artifact"], "-o", str(a_file)]) == 2
    _one_error_line(capsys, str(a_file), "cannot be written")
    assert a_file.read_text() == "mine"
    assert serve_main(["export-likes", store, "--model", renamed["artifact"], "-o", "/proc/self/x"]) == 2
    _one_error_line(capsys, "/proc/self/x", "cannot be written")


def test_export_into_the_current_folder_names_the_files_after_it(renamed, tmp_path, monkeypatch, capsys):
    store = _filled_store(tmp_path / "s.sqlite", renamed["data"])
    (tmp_path / "more").mkdir()
    monkeypatch.chdir(tmp_path / "more")
    assert serve_main(["export-likes", store, "--model", renamed["artifact"], "-o", "."]) == 0, capsys.readouterr()
    assert sorted(os.listdir(".")) == ["more.inter", "more.item"]


def test_export_with_the_model_of_other_fields_is_refused(renamed, tmp_path, capsys):
    store = _filled_store(tmp_path / "s.sqlite", renamed["data"], cells={"movie_title": "Heat", "genre": "g0"})
    out = tmp_path / "out"
    assert serve_main(["export-likes", store, "--model", renamed["artifact"], "-o", str(out)]) == 2
    _one_error_line(capsys, "'movie_title'", "does not read", "another dataset")
    assert not out.exists()
