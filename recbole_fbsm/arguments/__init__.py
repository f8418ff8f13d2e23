"""The options of the commands whose code loads torch, RecBole or pandas at import (compare, hyper, convert,
serve): each module builds its command's argparse parser from argparse and the config layer alone, so that
``recbole-fbsm COMMAND --help`` and a usage error answer in a fraction of a second (``recbole_fbsm.__main__``
parses with it before it imports the command's module; tests/arguments/test_cli_help.py checks no heavy import).
The commands of ``recbole_fbsm.run_command`` (run, download, models) parse there: that module is light itself."""
