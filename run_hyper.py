"""Hyperparameter search, as RecBole's ``run_hyper.py``: ``python run_hyper.py --model=FBSM --dataset=ml-100k
--params_file=hyper.test [--config_files="a.yaml b.yaml"] [--output_file=FBSM.result] [--key=value ...]``.

Trials run the plugin's cold-start protocol and live in an Optuna study (``--storage``, ``--study_name``):
``--help`` lists the options, docs/tune.md explains them.
"""

import sys

from recbole_fbsm.__main__ import dispatch

if __name__ == "__main__":
    # as `recbole-fbsm hyper`: --help before torch loads, OpenMP's wait policy set first (docs/performance.md)
    sys.exit(dispatch("hyper", sys.argv[1:], prog="run_hyper.py"))
