"""The options of the commands whose code loads torch, RecBole or pandas at import: each module builds its command's
argparse parser from argparse and the config layer alone, so that ``--help`` and a usage error answer at once
(``recbole_fbsm.__main__`` parses with it before it imports the command; tests/arguments/test_cli_help.py)."""
