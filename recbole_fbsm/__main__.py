"""The installed command line: ``recbole-fbsm COMMAND [options]`` or ``python -m recbole_fbsm COMMAND [options]``."""

import difflib
import pkgutil
import sys
from typing import NamedTuple

from recbole_fbsm.runtime.openmp import prefer_passive_wait, torch_threads_asked


class Command(NamedTuple):
    """One command: ``parser`` and ``main`` as "module:function" names, imported only when the command is chosen; the
    parser's module imports no torch (tests/arguments/test_cli_help.py), so that ``--help`` answers at once."""

    parser: str
    main: str
    about: str


COMMANDS = {
    "run": Command(
        "recbole_fbsm.run_command:run_parser",
        "recbole_fbsm.run_command:main",
        "train and test one model under the item cold-start protocol (run_recbole.py)",
    ),
    "compare": Command(
        "recbole_fbsm.arguments.compare:build_parser",
        "recbole_fbsm.experiments.compare:main",
        "run several models over the same item splits: a table and a chart",
    ),
    "hyper": Command(
        "recbole_fbsm.arguments.hyper:build_parser",
        "recbole_fbsm.experiments.tune:main",
        "search hyperparameters on validation, on an Optuna study (run_hyper.py)",
    ),
    "download": Command(
        "recbole_fbsm.run_command:download_parser",
        "recbole_fbsm.run_command:download_main",
        "fetch a public dataset (citeulike-t), check its checksums, convert it",
    ),
    "convert": Command(
        "recbole_fbsm.arguments.convert:build_parser",
        "recbole_fbsm.convert.__main__:main",
        "write RecBole atomic files from CiteULike/CTR files or CSV + text",
    ),
    "serve": Command(
        "recbole_fbsm.arguments.serve:build_parser",
        "recbole_fbsm.serve.__main__:main",
        "score brand-new items with a trained model, explain scores",
    ),
    "models": Command(
        "recbole_fbsm.run_command:models_parser",
        "recbole_fbsm.run_command:models_main",
        "list every model a run accepts, with one line of what it is",
    ),
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
    ]
    lines += [f"  {name:<{width}}  {command.about}" for name, command in COMMANDS.items()]
    lines += [
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
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        print(f"error: unknown command {command!r}{hint}; the commands are {', '.join(COMMANDS)}.", file=sys.stderr)
        return 2
    return dispatch(command, rest, prog=f"{PROG} {command}")


def dispatch(command, argv, prog):
    """Run one command with its arguments (``run_hyper.py`` comes here too): parsed first by its light parser,
    so that ``--help`` and a usage error never wait for torch; then its module is imported and run."""
    if command in TRAINING_COMMANDS:  # before the command's imports load torch and its OpenMP runtime
        prefer_passive_wait(torch_threads_asked(argv))
    spec = COMMANDS[command]
    pkgutil.resolve_name(spec.parser)(prog).parse_known_args(argv)  # --help, a malformed option: exits here
    return pkgutil.resolve_name(spec.main)(argv, prog=prog)


if __name__ == "__main__":
    sys.exit(main())
