"""A run says plainly what it did: real counts, the epoch kept (never RecBole's "epoch -1"), plain numbers."""

import subprocess
import sys

from helpers import RUN_RECBOLE

from recbole_fbsm.quick_start import run


def test_run_returns_plain_floats(tmp_path):
    result = run("CoSim", "ml-100k", config_dict={"state": "ERROR", "checkpoint_dir": str(tmp_path / "saved")})
    for key in ("test_result", "best_valid_result"):
        assert type(result[key]) is dict and all(type(v) is float for v in result[key].values())
    assert type(result["best_valid_score"]) is float
    assert repr(result["test_result"]).startswith("{'recall@10': 0.")


def test_summary_counts_real_users_and_no_recbole_epoch_line(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(RUN_RECBOLE),
            "--model=FBSM",
            "--dataset=ml-100k",
            "--epochs=2",
            "--stopping_step=1",
            "--state=INFO",
            "--torch_threads=1",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout + done.stderr
    assert "The number of users: 943" in output and "The number of items: 1682" in output
    assert "best eval result in epoch" not in output and "kept" in output
