"""N processes sharing one grid search on an sqlite study: how many points run twice and whether a failed or
killed point runs again, with Optuna's ``GridSampler`` alone (``--plain``, workers as Optuna documents them)
and with run_hyper's checks (``tune.point_taken``, ``tune.requeue_lost_points``). Trials sleep 0.1-0.5 s
(``--slow`` times that) instead of training; the grid has 8 points.

    python benchmarks/bench_shared_grid.py --workers 2 4 --repeats 3 [--plain]
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


class SleepingObjective(tune.Objective):
    def run_seed(self, trial, k, seed, settings, done):
        time.sleep(random.uniform(0.1, 0.5) * self.slow)
        return {"best_valid_score": settings["a"] + settings["b"] / 10, "test_result": {}, "seconds": 0}


def worker(url, plain, slow):
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    sampler = tune.make_sampler("grid", PARAMS)
    study = optuna.load_study(study_name="grid", storage=tune.make_storage(url), sampler=sampler)
    search = SimpleNamespace(params=PARAMS, seeds=[1], valid_metric="score", bigger=True)
    objective = SleepingObjective(search, grid=not plain, log=lambda *_: None)
    objective.slow = slow
    if plain:  # as Optuna documents a distributed search: every worker runs optimize on the shared study
        study.optimize(objective, n_trials=20, catch=(tune.TrialFailed,))
        return
    for _ in range(20):  # run_hyper's loop (tune.optimize)
        if not tune.requeue_lost_points(study, search_space.grid_size(PARAMS), objective.skip):
            break
        study.optimize(objective, n_trials=1, catch=(tune.TrialFailed, tune.PointTaken))


def run(url, workers, args):
    processes = [multiprocessing.Process(target=worker, args=(url, args.plain, args.slow)) for _ in range(workers)]
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
    parser.add_argument("--plain", action="store_true", help="Optuna's GridSampler alone")
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
