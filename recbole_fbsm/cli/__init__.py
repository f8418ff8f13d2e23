"""The command line: ``recbole-fbsm COMMAND [options]`` (``python -m recbole_fbsm``, ``run_recbole.py``,
``run_hyper.py``). Each command parses its options first, from argparse and the config layer alone, and imports
torch, RecBole or pandas only then: ``--help`` and a usage error answer at once (tests/cli/test_cli_help.py)."""

import difflib
import sys
from collections.abc import Callable
from typing import NamedTuple

from recbole_fbsm.cli import datasets, experiments, run, serve
from recbole_fbsm.runtime.openmp import prefer_passive_wait, torch_threads_asked


class Command(NamedTuple):
    parser: Callable  # prog -> its argparse parser
    main: Callable  # (argv, prog) -> exit status
    about: str


COMMANDS = {
    "run": Command(
        run.run_parser, run.run, "train and test one model under the item cold-start protocol (run_recbole.py)"
    ),
    "compare": Command(
        experiments.compare_parser,
        experiments.compare,
        "run several models over the same item splits: a table and a chart",
    ),
    "hyper": Command(
        experiments.hyper_parser,
        experiments.hyper,
        "search hyperparameters on validation, on an Optuna study (run_hyper.py)",
    ),
    "download": Command(
        datasets.download_parser,
        datasets.download,
        "fetch a public dataset (citeulike-t), check its checksums, convert it",
    ),
    "convert": Command(
        datasets.convert_parser,
        datasets.convert,
        "write RecBole atomic files from CiteULike/CTR files or CSV + text",
    ),
    "serve": Command(serve.serve_parser, serve.serve, "score brand-new items with a trained model, explain scores"),
    "models": Command(run.models_parser, run.models, "list every model a run accepts, with one line of what it is"),
}
PROG = "recbole-fbsm"
# commands that train with torch_threads: auto (runtime.threads): OpenMP's threads should sleep while they wait
TRAINING_COMMANDS = ("run", "compare", "hyper")


def usage():
    width = max(map(len, COMMANDS))
    lines = [
        f"usage: {PROG} COMMAND [options]   ({PROG} COMMAND --help for a command's options)",
        "",
        "Item cold-start recommendation on RecBole: FBSM, UFSM, CoSim, ItemKNNCBF, DropoutNet, Heater, ALDI",
        "",
        "commands:",
        *(f"  {name:<{width}}  {command.about}" for name, command in COMMANDS.items()),
        "",
        f"example: {PROG} run --model=FBSM --dataset=ml-100k",
        f"         {PROG} download citeulike-t && {PROG} run --model=FBSM --dataset=citeulike-t",
    ]
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        from importlib.metadata import version

        print(f"{PROG} {version('recbole-fbsm')}")
        return 0
    if argv[0] not in COMMANDS:
        close = difflib.get_close_matches(argv[0], COMMANDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        print(f"error: unknown command {argv[0]!r}{hint}; the commands are {', '.join(COMMANDS)}.", file=sys.stderr)
        return 2
    return dispatch(argv[0], argv[1:], prog=f"{PROG} {argv[0]}")


def dispatch(command, argv=None, prog=None):
    """Run one command (``run_recbole.py`` and ``run_hyper.py`` come here too)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if command in TRAINING_COMMANDS:  # before the command's imports load torch and its OpenMP runtime
        prefer_passive_wait(torch_threads_asked(argv))
    return COMMANDS[command].main(argv, prog)
