"""N processes sharing one grid search on an sqlite study (``tune.optimize``: Optuna's ``GridSampler``, heartbeat and
retry callback): how many points run twice and whether a killed point runs again. Trials sleep 0.1-0.5 s (``--slow``
times that) instead of training; the grid has 8 points.

    python benchmarks/bench_shared_grid.py --workers 2 4 --repeats 3
    python benchmarks/bench_shared_grid.py --workers 4 --kill-after 3 --slow 3   # one worker killed, then a restart
"""

import argparse
import multiprocessing
import os
import random
import signal
import tempfile
import time
import warnings
from collections import Counter
from types import SimpleNamespace

import optuna

from recbole_fbsm.experiments import search_space, tune

PARAMS = search_space.parse_params_text("a choice [0, 1, 2, 3]\nb choice [0, 1]\n")


def sleeping_run_seed(self, trial, k, seed, settings, done):
    time.sleep(random.uniform(0.1, 0.5) * SLOW[0])
    return {"best_valid_score": settings["a"] + settings["b"] / 10, "test_result": {}, "seconds": 0}


SLOW = [1.0]


def worker(url, slow):
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    SLOW[0] = slow
    tune.Objective.run_seed = sleeping_run_seed
    sampler = tune.make_sampler("grid", PARAMS)
    study = optuna.load_study(study_name="grid", storage=tune.make_storage(url), sampler=sampler)
    search = SimpleNamespace(params=PARAMS, seeds=[1], valid_metric="score", bigger=True)
    tune.optimize(search, study, search_space.grid_size(PARAMS))


def run(url, workers, args):
    processes = [multiprocessing.Process(target=worker, args=(url, args.slow)) for _ in range(workers)]
    for process in processes:
        process.start()
    if args.kill_after:
        time.sleep(args.kill_after)
        os.kill(processes[0].pid, signal.SIGKILL)
    for process in processes:
        process.join()
    if args.kill_after:  # the same command again
        run(url, 1, argparse.Namespace(**{**vars(args), "kill_after": 0}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kill-after", type=float, default=0, help="SIGKILL one worker after this many seconds")
    parser.add_argument("--slow", type=float, default=1.0)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with tempfile.TemporaryDirectory() as folder:
        for workers in args.workers:
            for repeat in range(args.repeats):
                url = f"sqlite:///{folder}/grid-{workers}-{repeat}.db"
                optuna.create_study(study_name="grid", storage=url, direction="maximize")
                run(url, workers, args)
                trials = optuna.load_study(study_name="grid", storage=url).trials
                done = Counter((t.params["a"], t.params["b"]) for t in trials if t.state.name == "COMPLETE")
                print(
                    f"{workers} workers, run {repeat + 1}: {len(done)} of 8 points complete, "
                    f"{sum(done.values()) - len(done)} run twice; trials {dict(Counter(t.state.name for t in trials))}"
                )


if __name__ == "__main__":
    main()
