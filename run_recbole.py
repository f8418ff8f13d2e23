"""RecBole's ``run_recbole.py`` for the plugin:
``python run_recbole.py --model=FBSM --dataset=ml-100k [--key=value ...]``.

The same command as the installed ``recbole-fbsm run`` (``recbole_fbsm/cli/run.py``; ``--help`` lists the options).
"""

import sys

from recbole_fbsm.cli import dispatch


def main(argv=None):
    return dispatch("run", argv, prog="run_recbole.py")


if __name__ == "__main__":
    sys.exit(main())
