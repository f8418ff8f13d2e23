"""``run_hyper.py`` processes on one sqlite study: a grid shared by Optuna's GridSampler, a killed search resumed."""

import signal
import subprocess
import sys
import time
from collections import Counter

import optuna
import yaml
from helpers import REPO_ROOT, cli_env, dataset_config
from optuna.trial import TrialState

RUN_HYPER = REPO_ROOT / "run_hyper.py"
GRID = "rank choice [1, 2]\nreg_V choice [0.01, 0.1]\n"  # 4 points
STUDY = "fbsm-toy"


def start(tmp_path, *extra):
    args = [
        sys.executable,
        str(RUN_HYPER),
        "--model=FBSM",
        "--dataset=toy",
        f"--config_files={tmp_path / 'toy.yaml'}",
        f"--params_file={tmp_path / 'grid.hyper'}",
        f"--storage=sqlite:///{tmp_path / 'tune.db'}",
        f"--study_name={STUDY}",
        f"--output_file={tmp_path / 'grid.result'}",
        "--pruner=none",
        *extra,
    ]
    return subprocess.Popen(
        args, cwd=str(tmp_path), env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(process, timeout=300):
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    return out


def setup_search(toy, tmp_path, **settings):
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(dataset_config(toy, **settings)))
    (tmp_path / "grid.hyper").write_text(GRID)


def trials(tmp_path):
    """The study's trials; none while the search has not created it yet."""
    try:
        return optuna.load_study(study_name=STUDY, storage=f"sqlite:///{tmp_path / 'tune.db'}").get_trials()
    except KeyError:
        return []


def points(trial_list, state=TrialState.COMPLETE):
    return Counter((t.params["rank"], t.params["reg_V"]) for t in trial_list if t.state == state)


def test_two_processes_split_a_grid(toy, tmp_path):
    """Each point runs; GridSampler gives an idle process a point still running elsewhere at the end (Optuna's
    documented behaviour in a shared grid), so at most one point runs twice with two processes."""
    setup_search(toy, tmp_path, epochs=3)
    first, second = start(tmp_path), start(tmp_path)
    outputs = [finish(first), finish(second)]
    done = trials(tmp_path)
    assert set(points(done)) == {(1, 0.01), (1, 0.1), (2, 0.01), (2, 0.1)}
    assert len(done) <= 5 and all(t.state == TrialState.COMPLETE for t in done)
    ran = [line for out in outputs for line in out.splitlines() if line.startswith("[trial")]
    assert len(ran) == len(done)
    best = max((t for t in done if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    assert (
        (tmp_path / "grid.result")
        .read_text()
        .startswith(f"best params: rank:{best.params['rank']}, reg_V:{best.params['reg_V']}\n")
    )


def test_a_killed_search_keeps_its_finished_trials_and_resumes(toy, tmp_path):
    setup_search(toy, tmp_path, epochs=40, stopping_step=100)  # trials of about a second
    process = start(tmp_path)
    deadline = time.monotonic() + 240
    while not points(trials(tmp_path)) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert process.poll() is None, "the search ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.communicate()
    before = {t.number: (t.params, t.value) for t in trials(tmp_path) if t.state == TrialState.COMPLETE}
    assert 1 <= len(before) < 4

    finish(start(tmp_path))
    after = trials(tmp_path)
    assert {t.number: (t.params, t.value) for t in after if t.number in before} == before  # kept, not rerun
    # the killed trial's point run again by the restart (GridSampler runs an unfinished point last; the killed trial
    # stays running until its heartbeat is HEARTBEAT_GRACE_S old, then Optuna fails it)
    assert points(after) == Counter({(1, 0.01): 1, (1, 0.1): 1, (2, 0.01): 1, (2, 0.1): 1})
