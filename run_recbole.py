"""RecBole's ``run_recbole.py`` for the plugin:
``python run_recbole.py --model=FBSM --dataset=ml-100k [--key=value ...]``.

The same command as the installed ``recbole-fbsm run`` (``recbole_fbsm/run_command.py``; ``--help`` lists the options).
"""

import sys

from recbole_fbsm.__main__ import dispatch

if __name__ == "__main__":
    # as `recbole-fbsm run`: --help before torch loads, OpenMP's wait policy set first (docs/performance.md)
    sys.exit(dispatch("run", sys.argv[1:], prog="run_recbole.py"))
