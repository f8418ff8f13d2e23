"""``python -m recbole_fbsm.convert {ctr,text} ...``: ``recbole-fbsm convert`` (properties/dataset/*.yaml name it)."""

import sys

from recbole_fbsm.cli import main

if __name__ == "__main__":
    sys.exit(main(["convert", *sys.argv[1:]]))
