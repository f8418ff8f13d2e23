"""``recbole-fbsm serve``: its sub-commands' options read from the argparse table (cli/options.py) before torch,
RecBole and pandas load for the work (cli/serve_commands.py)."""

from recbole_fbsm.cli.options import parser


def serve(argv, prog="recbole-fbsm serve"):
    args = parser("serve", prog).parse_args(argv)
    from recbole_fbsm.cli import serve_commands

    return serve_commands.main(args)
