"""``python -m recbole_fbsm COMMAND [options]``: the ``recbole-fbsm`` command line (recbole_fbsm/cli/)."""

import sys

from recbole_fbsm.cli import main

if __name__ == "__main__":
    sys.exit(main())
