"""RecBole's ``run_recbole.py`` for the plugin:
``python run_recbole.py --model=FBSM --dataset=ml-100k [--key=value ...]``.

The same command as the installed ``recbole-fbsm run`` (``recbole_fbsm/run_command.py``; ``--help`` lists the options).
"""

import sys

from recbole_fbsm.__main__ import dispatch


def main(argv=None):
    """As `recbole-fbsm run`: --help before torch loads, OpenMP's wait policy set first (docs/performance.md)."""
    return dispatch("run", sys.argv[1:] if argv is None else argv, prog="run_recbole.py")


if __name__ == "__main__":
    sys.exit(main())
