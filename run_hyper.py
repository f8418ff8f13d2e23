"""Hyperparameter search, as RecBole's ``run_hyper.py``: ``python run_hyper.py --model=FBSM --dataset=ml-100k
--params_file=hyper.test [--config_files="a.yaml b.yaml"] [--output_file=FBSM.result] [--key=value ...]``.

Trials run the plugin's cold-start protocol and live in an Optuna study (``--storage``, ``--study_name``):
``--help`` lists the options, docs/tune.md explains them.
"""

import sys

from recbole_fbsm.runtime.openmp import prefer_passive_wait_for

if __name__ == "__main__":
    prefer_passive_wait_for(sys.argv[1:])  # before torch loads OpenMP: torch_threads auto (docs/performance.md)
    from recbole_fbsm.experiments.tune import main

    sys.exit(main(prog="run_hyper.py"))
