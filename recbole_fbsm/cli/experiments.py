"""``recbole-fbsm compare`` and ``recbole-fbsm hyper`` (``run_hyper.py``): several runs over item splits, their
options read before torch, RecBole and Optuna load (``recbole_fbsm.experiments`` runs them)."""

from pathlib import Path

from recbole_fbsm.cli.options import ALGOS, parser
from recbole_fbsm.config.checks import SEED_MAX
from recbole_fbsm.config.cli import parse_with_settings, typed_command

# Set per split by --seeds, or chosen by the command itself: not accepted as --key=value.
COMPARE_RESERVED_KEYS = {
    "seed": "set per split by --seeds",
    "split_seed": "set per split by --seeds (seed = split_seed)",
    "model": "use --models",
    "dataset": "use --dataset",
}
HYPER_RESERVED_KEYS = {**COMPARE_RESERVED_KEYS, "split_seed": "set per split by --seeds", "model": "use --model"}


def options(command, argv, prog, reserved):
    """(options, {key: value} of the --key=value settings); a usage error ends here, before anything loads."""
    command_parser = parser(command, prog)
    args, overrides = parse_with_settings(command_parser, argv, reserved)
    for option, values in {"--seeds": args.seeds, "--models": getattr(args, "models", [])}.items():
        if len(set(values)) != len(values):
            command_parser.error(f"{option}: a {option[2:-1]} is listed twice")
    if any(not 0 <= seed <= SEED_MAX for seed in args.seeds):
        command_parser.error(f"--seeds: expected integers from 0 to {SEED_MAX} (numpy's seeding); got {args.seeds}")
    if getattr(args, "results", None) and Path(args.results).exists() and not Path(args.results).is_dir():
        command_parser.error(f"--results {args.results}: expected a folder (new, or one to resume); it is a file")
    return args, overrides


def compare_options(argv, prog="recbole-fbsm compare"):
    return options("compare", argv, prog, COMPARE_RESERVED_KEYS)


def compare(argv, prog="recbole-fbsm compare"):
    args, overrides = compare_options(argv, prog)
    from recbole_fbsm.experiments.compare import main

    return main(args, overrides, typed_command(argv, prog))


def hyper(argv, prog="recbole-fbsm hyper"):
    args, overrides = options("hyper", argv, prog, HYPER_RESERVED_KEYS)
    args.algo = ALGOS.get(args.algo)
    from recbole_fbsm.experiments.tune import main

    return main(args, overrides, typed_command(argv, prog))
