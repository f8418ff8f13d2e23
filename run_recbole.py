"""RecBole's ``run_recbole.py`` for the plugin:
``python run_recbole.py --model=FBSM --dataset=ml-100k [--key=value ...]``.

The same command as the installed ``recbole-fbsm run`` (``recbole_fbsm/run_command.py``; ``--help`` lists the options).
"""

import sys

from recbole_fbsm.run_command import main

if __name__ == "__main__":
    sys.exit(main(prog="run_recbole.py"))
