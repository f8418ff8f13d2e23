"""Model artifacts: safe to load, bound to their feature names, served without the dataset, written whole."""

import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from helpers import planted_settings, score_new_items, train_planted

from recbole_fbsm.artifact.model_file import read_artifact
from recbole_fbsm.cli.serve import serve as serve_main
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.quick_start import run
from recbole_fbsm.serve import compare_users, explain, load_model, read_new_items, recommend, strongest_interactions
from recbole_fbsm.storage.safe_files import load_checkpoint, load_tensors, save_tensors


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    # an epoch kept, not the untrained start: interactions are listed for a learned V only (test_kept_start.py)
    fbsm = {"epochs": 2, "rank": 3, "init_std": 0.1, "valid_before_training": False}
    data, results = train_planted(tmp_path_factory.mktemp("artifact"), {"FBSM": fbsm, "CoSim": {}})
    return {**data, **results, "common": planted_settings(data["root"])}


class Payload:
    """Unpickling this runs ``os.system``: what a crafted checkpoint would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_crafted_pickle_is_refused_and_its_payload_never_runs(trained, tmp_path, capsys):
    """A torch.save file (a pickle) is refused in one line wherever a model file is read, its payload never run;
    an old release's checkpoint is one: retrain."""
    marker = tmp_path / "payload-ran"
    crafted = tmp_path / "crafted.pth"
    torch.save({"config": Payload(marker), "state_dict": {}}, crafted)
    with pytest.raises(ColdStartError, match=r"holds pickled Python objects .* could run any code.*retrain"):
        load_model(crafted)
    assert serve_main(["recommend", str(crafted), str(trained["new_file"])]) == 2
    assert capsys.readouterr().err.startswith("error: model file ")
    assert serve_main(["export", str(crafted), "-o", str(tmp_path / "x.fbsm")]) == 2
    with pytest.raises(
        ColdStartError, match=r"warm_checkpoint: .*crafted.pth holds pickled Python objects .* Train the warm"
    ):
        run("DropoutNet", trained["name"], config_dict={**trained["common"], "warm_checkpoint": str(crafted)})
    assert not marker.exists()
    # the plugin's own files, checkpoints and artifacts alike, load without unpickling any object
    assert load_checkpoint(trained["FBSM"]["saved_model_file"])["config"]["model"] == "FBSM"
    assert read_artifact(trained["FBSM"]["artifact_file"])["model"] == "FBSM"


def test_a_checkpoint_exports_to_the_artifact_its_run_wrote(trained, tmp_path):
    """``serve export`` of a run's checkpoint (the same file format) gives the scores of the run's own artifact."""
    converted = tmp_path / "again.fbsm"
    assert serve_main(["export", str(trained["FBSM"]["saved_model_file"]), "-o", str(converted)]) == 0
    users = torch.arange(1, 20)
    reference = load_model(trained["FBSM"]["artifact_file"])
    torch.testing.assert_close(
        score_new_items(
            load_model(converted), read_new_items(load_model(converted), trained["new_file"], warn=False), users
        ),
        score_new_items(reference, read_new_items(reference, trained["new_file"], warn=False), users),
    )


def test_an_artifact_serves_with_the_dataset_folder_removed(trained, tmp_path):
    root = tmp_path / "moved"
    shutil.copytree(trained["root"] / "saved", root)
    fbsm = root / os.path.basename(trained["FBSM"]["artifact_file"])
    cosim = root / os.path.basename(trained["CoSim"]["artifact_file"])
    before = load_model(fbsm)
    new_file = tmp_path / "new.item"
    shutil.copy(trained["new_file"], new_file)
    expected = recommend(before, new_file, top=3).for_items
    hidden = trained["root"].parent / (trained["root"].name + "-hidden")
    os.rename(trained["root"], hidden)  # no dataset folder, no checkpoint: the artifact alone
    try:
        served = load_model(fbsm)
        assert served.features.names == before.features.names
        lists = recommend(served, new_file, top=3)
        assert lists.for_items.equals(expected)
        user = served.user_tokens([1])[0]
        explanation = explain(served, user, lists.for_items["item_id"][0], new_items=new_file)
        assert explanation.score == pytest.approx(explanation.model_score, rel=1e-5, abs=1e-7)
        assert len(strongest_interactions(served, top=3)) > 0
        comparison = compare_users(served, load_model(cosim), k=10)
        assert comparison.groups.set_index("group").loc["all", "users"] > 0
    finally:
        os.rename(hidden, trained["root"])


def test_renamed_tokens_never_shift_the_weights(trained, tmp_path):
    """The artifact maps features by name; exporting a checkpoint on data whose vocabulary changed is refused."""
    served = load_model(trained["FBSM"]["artifact_file"])
    names = list(served.features.names)
    copy = tmp_path / "data"
    shutil.copytree(trained["root"] / trained["name"], copy / trained["name"])
    item_file = copy / trained["name"] / f"{trained['name']}.item"
    text = item_file.read_text()
    assert " n7 " in text or "\tn7 " in text
    item_file.write_text(text.replace("n7", "n7renamed"))  # one token renamed in every item that has it
    with pytest.raises(ColdStartError, match=r"feature vocabulary is not the one it was trained on .*'words:n7'"):
        load_model(trained["FBSM"]["saved_model_file"], data_path=copy)
    # the artifact never reads the data: the same names, and a new item with n7 still gets n7's weight
    assert load_model(trained["FBSM"]["artifact_file"]).features.names == names
    new = tmp_path / "one.item"
    new.write_text("item_id:token\tgenre:token\twords:token_seq\nz1\tg0\tn7 t0\nz2\tg0\tn7renamed t0\n")
    with pytest.warns(UserWarning, match="n7renamed"):
        items = read_new_items(served, new)
    column = names.index("words:n7")
    assert items.matrix[0, column] > 0 and items.matrix[1, column] == 0


def _writer(path, rounds):
    """Child process: rewrite ``path`` with a large artifact-like file, over and over."""
    code = (
        "import sys, torch\n"
        "from recbole_fbsm.storage.safe_files import save_tensors\n"
        f"for k in range({rounds}):\n"
        "    save_tensors({'round': k, 'weights': torch.full((4_000_000,), float(k))}, sys.argv[1])\n"
        "    print(k, flush=True)\n"
    )
    return subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)


def test_a_killed_save_never_leaves_a_truncated_file(tmp_path):
    path = tmp_path / "model.fbsm"
    save_tensors({"round": -1, "weights": torch.zeros(4_000_000)}, path)
    for delay in (0.3, 0.9, 1.7):
        process = _writer(path, 1000)
        process.stdout.readline()  # at least one full write happened
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        _, content = load_tensors(path, "file")  # always a whole file: the last completed write
        assert torch.equal(content["weights"], torch.full((4_000_000,), float(content["round"])))
    np.testing.assert_equal(sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")), ["model.fbsm"])
