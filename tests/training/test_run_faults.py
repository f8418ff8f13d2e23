"""Faults inside a run that used to end in a traceback or a wrong result: a diverged loss, an empty config file."""

import json
import subprocess
import sys

from helpers import RUN_RECBOLE, item_token_ids, write_dataset


def run_recbole(tmp_path, *args):
    return subprocess.run(
        [sys.executable, str(RUN_RECBOLE), "--dataset=toy", f"--data_path={tmp_path}", "--torch_threads=1", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )


# FBSM whose loss becomes NaN in its first epoch: no clipping holds a learning rate of 1e30
DIVERGING = [
    "--model=FBSM",
    "--epochs=5",
    "--learning_rate=1e30",
    "--clip_grad_norm=None",
    "--valid_before_training=False",
]


def test_a_nan_loss_stops_training_keeps_the_best_epoch_and_writes_the_result(tmp_path):
    write_dataset(tmp_path, "toy")
    done = run_recbole(tmp_path, *DIVERGING)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    line = next(text for text in (done.stdout + done.stderr).splitlines() if "became NaN" in text)
    assert "training stopped at epoch 1" in line and "learning_rate=1e+30" in line and "clip_grad_norm" in line
    assert "best epoch so far on validation (0) is kept" in line
    (result_file,) = list(tmp_path.glob("log/FBSM/*.json"))
    assert json.loads(result_file.read_text())["test_result"]


def test_a_nan_loss_before_any_validation_is_one_error_line(tmp_path):
    write_dataset(tmp_path, "toy")
    done = run_recbole(tmp_path, *DIVERGING, "--eval_step=3")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: training stopped at epoch") and last.endswith("so there is no model to keep.")


def test_an_empty_config_file_holds_no_setting(tmp_path):
    write_dataset(tmp_path, "toy")
    (tmp_path / "empty.yaml").write_text("# nothing here yet\n")
    done = run_recbole(tmp_path, "--model=CoSim", "--config_files=empty.yaml")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "test result: {'recall@10'" in done.stdout


def test_a_failed_checkpoint_write_leaves_the_last_good_one_whole(tmp_path, monkeypatch):
    """A save that dies half-way (a full disk, a kill) never truncates the file a good checkpoint was in."""
    import pytest

    from recbole_fbsm.errors import ColdStartError
    from recbole_fbsm.quick_start import prepare
    from recbole_fbsm.training.trainer import get_trainer

    write_dataset(tmp_path, "toy")
    monkeypatch.chdir(tmp_path)
    config, model, _ = prepare(
        "FBSM",
        "toy",
        config_dict={"data_path": str(tmp_path), "state": "ERROR", "checkpoint_dir": str(tmp_path / "saved")},
    )
    trainer = get_trainer(config["MODEL_TYPE"], "FBSM")(config, model)
    trainer._save_checkpoint(0, verbose=False)
    good = open(trainer.saved_model_file, "rb").read()
    import recbole_fbsm.storage.safe_files as safe_files

    def disk_full(descriptor):  # the bytes went to the temporary file, the flush to disk fails
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safe_files.os, "fsync", disk_full)
    with pytest.raises(ColdStartError, match=r"could not be written \(No space left on device\); the last one"):
        trainer._save_checkpoint(1, verbose=False)
    monkeypatch.undo()
    assert open(trainer.saved_model_file, "rb").read() == good
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == [trainer.saved_model_file.split("/")[-1]]


def test_a_result_file_that_cannot_be_written_still_returns_the_results(tmp_path, monkeypatch):
    from recbole_fbsm import quick_start

    write_dataset(tmp_path, "toy")
    monkeypatch.chdir(tmp_path)

    def full_disk(path, record):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(quick_start, "write_record", full_disk)
    result = quick_start.run(
        "CoSim",
        "toy",
        config_dict={"data_path": str(tmp_path), "state": "ERROR", "checkpoint_dir": str(tmp_path / "saved")},
    )
    assert result["result_file"] is None and result["test_result"]["recall@10"] >= 0


def test_a_text_longer_than_the_csv_field_limit_is_read_whole(tmp_path):
    """A 150,000-character cell in a file that also holds a quote (RecBole's own reader then, whose csv module
    stopped at 131,072 characters) is read whole."""
    import random

    from recbole_fbsm.quick_start import prepare

    random.seed(0)
    folder = tmp_path / "big"
    folder.mkdir()
    inter = ["user_id:token\titem_id:token"] + [f"u{u}\ti{random.randrange(40)}" for u in range(30) for _ in range(6)]
    (folder / "big.inter").write_text("\n".join(inter) + "\n")
    rows = ["item_id:token\twords:token_seq"]
    for i in range(40):
        words = " ".join(["long"] * 30000) if i == 3 else " ".join(f"w{random.randrange(30)}" for _ in range(5))
        rows.append(f"i{i}\t{words}" + (' say"quoted' if i == 5 else ""))
    (folder / "big.item").write_text("\n".join(rows) + "\n")
    _, model, (train_data, _, _) = prepare(
        "CoSim",
        "big",
        config_dict={"data_path": str(tmp_path), "state": "ERROR", "topk": [5], "valid_metric": "Recall@5"},
    )
    dataset = train_data._dataset
    long_item = dataset.token2id(dataset.iid_field, "i3")
    assert len(item_token_ids(dataset, "words", long_item)) == 30000


def test_a_gpu_asked_for_by_number_that_torch_cannot_see_is_said(tmp_path):
    """RecBole hides the other GPUs (CUDA_VISIBLE_DEVICES=gpu_id) and runs on the CPU without a word."""
    import pytest
    import torch

    if torch.cuda.device_count() > 5:
        pytest.skip("this machine has a sixth GPU")
    write_dataset(tmp_path, "toy")
    done = run_recbole(tmp_path, "--model=CoSim", "--use_gpu=True", "--gpu_id=5")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "use_gpu is True, but torch sees no CUDA device for gpu_id '5'" in done.stdout + done.stderr


def test_a_tilde_in_data_path_is_the_home_folder(tmp_path):
    """'--data_path=~/data': the shell leaves the ~ alone after '=', so the run expands it."""
    import os

    write_dataset(tmp_path / "data", "toy")
    env = dict(os.environ, HOME=str(tmp_path))
    done = subprocess.run(
        [sys.executable, str(RUN_RECBOLE), "--model=CoSim", "--dataset=toy", "--data_path=~/data", "--torch_threads=1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "test result: {'recall@10'" in done.stdout
