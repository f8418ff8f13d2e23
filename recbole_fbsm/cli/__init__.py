"""The command line: ``recbole-fbsm COMMAND [options]`` (``python -m recbole_fbsm``, ``run_recbole.py``,
``run_hyper.py``). Each command parses its options first, from the argparse table (cli/options.py) and the config
layer alone, and imports torch, RecBole or pandas only then: ``--help`` and a usage error answer at once
(tests/cli/test_cli_help.py)."""

import argparse
import sys

from recbole_fbsm.cli import datasets, experiments, run, serve
from recbole_fbsm.cli.options import COMMANDS, TRAINING_COMMANDS
from recbole_fbsm.runtime.openmp import prefer_passive_wait, torch_threads_asked

PROG = "recbole-fbsm"
MAINS = {  # (argv, prog) -> exit status
    "run": run.run,
    "compare": experiments.compare,
    "hyper": experiments.hyper,
    "download": datasets.download,
    "convert": datasets.convert,
    "serve": serve.serve,
    "models": run.models,
}
EXAMPLES = f"""({PROG} COMMAND --help for a command's options)

example: {PROG} run --model=FBSM --dataset=ml-100k
         {PROG} download citeulike-t && {PROG} run --model=FBSM --dataset=citeulike-t"""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--version"]:
        from importlib.metadata import version

        print(f"{PROG} {version('recbole-fbsm')}")
        return 0
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Item cold-start recommendation on RecBole: "
        "FBSM, UFSM, CoSim, ItemKNNCBF, DropoutNet, Heater, ALDI",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name, command in COMMANDS.items():
        commands.add_parser(name, help=command.about, add_help=False)
    command = parser.parse_args(argv[:1]).command  # the command's own parser reads the rest
    return dispatch(command, argv[1:], prog=f"{PROG} {command}")


def dispatch(command, argv=None, prog=None):
    """Run one command (``run_recbole.py`` and ``run_hyper.py`` come here too)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if command in TRAINING_COMMANDS:  # before the command's imports load torch and its OpenMP runtime
        prefer_passive_wait(torch_threads_asked(argv))
    return MAINS[command](argv, prog)
