"""The installed command line: ``recbole-fbsm COMMAND [options]`` or ``python -m recbole_fbsm COMMAND [options]``.

Each command takes the options of the script or module it stands for (``recbole-fbsm COMMAND --help``).
"""

import difflib
import importlib
import sys

from recbole_fbsm.runtime.openmp import prefer_passive_wait_for

# command: (module with main(argv), or module:function, what it does). Imported only when chosen.
COMMANDS = {
    "run": ("recbole_fbsm.run_command", "train and test one model under the item cold-start protocol (run_recbole.py)"),
    "compare": ("recbole_fbsm.experiments.compare", "run several models over the same item splits: a table and a chart"),
    "hyper": ("recbole_fbsm.experiments.tune", "search hyperparameters on validation, on an Optuna study (run_hyper.py)"),
    "download": ("recbole_fbsm.run_command:download_main", "fetch a public dataset (citeulike-t), check its checksums, convert it"),
    "convert": ("recbole_fbsm.convert.__main__", "write RecBole atomic files from CiteULike/CTR files or CSV + text"),
    "serve": ("recbole_fbsm.serve.__main__", "score brand-new items with a trained model, explain scores"),
    "models": ("recbole_fbsm.run_command:models_main", "list every model a run accepts, with one line of what it is"),
}
PROG = "recbole-fbsm"
# commands that train with torch_threads: auto (runtime.threads): OpenMP's threads should sleep while they wait
TRAINING_COMMANDS = ("run", "compare", "hyper")


def usage():
    width = max(map(len, COMMANDS))
    lines = [f"usage: {PROG} COMMAND [options]   ({PROG} COMMAND --help for a command's options)", "",
             "Item cold-start recommendation on RecBole: FBSM, UFSM, CoSim, ItemKNNCBF, DropoutNet, Heater, ALDI", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", f"example: {PROG} run --model=FBSM --dataset=ml-100k",
              f"         {PROG} download citeulike-t && {PROG} run --model=FBSM --dataset=citeulike-t"]
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
    if command in TRAINING_COMMANDS:  # before the command's imports load torch and its OpenMP runtime
        prefer_passive_wait_for(rest)
    module_name, _, function = COMMANDS[command][0].partition(":")
    entry = getattr(importlib.import_module(module_name), function or "main")
    return entry(rest, prog=f"{PROG} {command}")


if __name__ == "__main__":
    sys.exit(main())
