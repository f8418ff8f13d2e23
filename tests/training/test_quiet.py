"""A default run's console: the summary a user needs, no config dump, no library warnings; the log
file keeps everything, and ``--state=INFO`` brings RecBole's full console back."""

import logging
import os
import subprocess
import sys

from helpers import RUN_RECBOLE, dataset_config

import recbole_fbsm
from recbole_fbsm.training.run_log import QuietConsoleHandler, on_console

MAX_CONSOLE_LINES = 40


def run_cosim(cwd, *extra, dataset="ml-100k"):
    """``run_recbole.py --model=CoSim --dataset=ml-100k`` as a user starts it (warnings not silenced)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env.update(OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, str(RUN_RECBOLE), "--model=CoSim", f"--dataset={dataset}", *extra],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def test_default_cosim_run_is_quiet_and_the_log_keeps_everything(tmp_path):
    console = run_cosim(tmp_path)
    lines = console.splitlines()
    assert len(lines) <= MAX_CONSOLE_LINES, console
    assert "General Hyper Parameters" not in console and "use_gpu" not in console  # the config dump
    assert "Warning" not in console and "warn" not in console.lower(), console
    for expected in (
        "The number of users",
        "[Item split] items train/valid/test",
        "nothing to train: CoSim",
        "valid recall@10",
        "test result:",
        "saved model:",
        "result file:",
    ):
        assert expected in console, expected
    (log,) = (tmp_path / "log" / "CoSim").glob("*.log")
    text = log.read_text()
    assert "General Hyper Parameters" in text and "valid result" in text


def test_state_info_brings_the_full_console_back(tmp_path, toy):
    settings = [f"--{key}={value}" for key, value in dataset_config(toy).items() if key != "state"]
    full = run_cosim(tmp_path, *settings, "--state=INFO", dataset=toy.name)
    assert "General Hyper Parameters" in full and len(full.splitlines()) > 100


def test_plugin_config_raises_no_numpy_deprecation():
    """config.py fills the numpy aliases RecBole needs without touching np.object / np.str (whose lookup
    itself is a FutureWarning in numpy 2)."""
    code = (
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from recbole_fbsm.config.cold_start_config import ColdStartConfig\n"
        "    ColdStartConfig(model='CoSim', dataset='ml-100k', config_dict={'use_gpu': False})\n"
        "    import numpy as np\n"
        "    np.object, np.str, np.float, np.float_\n"
        "print([f'{w.filename}:{w.lineno}: {w.message}' for w in caught if 'recbole_fbsm' in w.filename\n"
        "       or issubclass(w.category, FutureWarning) and 'np.' in str(w.message)])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def make_record(message, pathname="/elsewhere/recbole/trainer.py", level=logging.INFO, **extra):
    record = logging.LogRecord("root", level, pathname, 1, message, (), None)
    record.__dict__.update(extra)
    return record


class Stream:
    def __init__(self):
        self.lines = []

    def write(self, text):
        self.lines += text.splitlines()

    def flush(self):
        pass


def test_quiet_console_shortens_epoch_lines_and_hides_the_rest():
    stream = Stream()
    handler = QuietConsoleHandler(stream, "recall@10")
    handler.setFormatter(logging.Formatter("%(message)s"))
    plugin_file = os.path.join(os.path.dirname(recbole_fbsm.__file__), "trainer.py")
    green = "\x1b[1;32m"
    reset = "\x1b[0m"
    for record in [
        make_record("config dump", pathname=plugin_file, **on_console(False)),
        make_record(f"{green}epoch 0 training{reset} [time: 0.11s, train loss: 3.5000]"),
        make_record("epoch 0 evaluating [time: 0.08s, valid_score: 0.066700]"),
        make_record("valid result: \nrecall@10 : 0.0667"),
        make_record("Saving current: saved/x.pth"),
        make_record("epoch 1 training [time: 0.10s, train loss: 3.0000]"),  # no evaluation this epoch
        make_record("epoch 2 training [time: 0.10s, train loss: 2.5000]"),
        make_record("epoch 2 evaluating [time: 0.07s, valid_score: 0.070000]"),
        make_record("kept epoch 2: valid recall@10 0.0700", pathname=plugin_file),
        make_record("Finished training, best eval result in epoch 2"),
        make_record("some library warning", level=logging.WARNING),
        make_record("FutureWarning: x", level=logging.WARNING, name="py.warnings"),
    ]:
        handler.handle(record)
    handler.close()
    assert stream.lines == [
        "epoch 0: train loss: 3.5000 (0.11s)",
        "epoch 0: valid recall@10: 0.066700 (0.08s)",
        "epoch 1: train loss: 3.0000 (0.10s)",
        "epoch 2: train loss: 2.5000 (0.10s)",
        "epoch 2: valid recall@10: 0.070000 (0.07s)",
        "kept epoch 2: valid recall@10 0.0700",
        "some library warning",
    ]
