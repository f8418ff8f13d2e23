"""Hyperparameter search, as RecBole's ``run_hyper.py``: ``python run_hyper.py --model=FBSM --dataset=ml-100k
--params_file=hyper.test [--config_files="a.yaml b.yaml"] [--output_file=FBSM.result] [--key=value ...]``.

Trials run the plugin's cold-start protocol and live in an Optuna study (``--storage``, ``--study_name``):
``--help`` lists the options, docs/tune.md explains them. The same command as ``recbole-fbsm hyper``.
"""

import sys

from recbole_fbsm.cli import dispatch

if __name__ == "__main__":
    sys.exit(dispatch("hyper", prog="run_hyper.py"))
