"""``recbole-fbsm hyper``'s (``run_hyper.py``'s) options (``--help``), read before torch, RecBole and Optuna
load (``recbole_fbsm.experiments.tune`` runs the search)."""

import argparse

from recbole_fbsm.arguments.compare import RESERVED_KEYS as COMPARE_RESERVED_KEYS
from recbole_fbsm.arguments.compare import check_seeds
from recbole_fbsm.config.cli import parse_with_settings
from recbole_fbsm.config.paths import LOCAL_PROPERTIES_DIR

DESCRIPTION = "Hyperparameter search on validation, the RecBole way (``run_hyper.py``), on an Optuna study."
RESERVED_KEYS = {**COMPARE_RESERVED_KEYS, "split_seed": "set per split by --seeds", "model": "use --model"}
ALGOS = {"grid": "grid", "exhaustive": "grid", "tpe": "tpe", "bayes": "tpe", "random": "random"}
DEFAULT_MAX_EVALS = 100  # RecBole's, for tpe and random


def build_parser(prog="run_hyper.py"):
    parser = argparse.ArgumentParser(
        prog=prog, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--model", "-m", required=True)
    parser.add_argument("--dataset", "-d", default="ml-100k")
    parser.add_argument("--config_files", default=None, help="space-separated yaml files, used by every trial")
    parser.add_argument(
        "--params_file",
        default=None,
        help="RecBole params file (NAME choice|uniform|loguniform|quniform RANGE per line) or a yaml "
        "grid (default: properties/grids/MODEL.hyper, else MODEL.yaml)",
    )
    parser.add_argument("--output_file", default=None, help="RecBole's result file (default: STUDY_NAME.result)")
    parser.add_argument(
        "--algo",
        choices=sorted(ALGOS),
        default=None,
        help="grid (every parameter a choice; the default then), tpe (the default otherwise) or random",
    )
    parser.add_argument(
        "--max_evals",
        type=int,
        default=None,
        help=f"finished trials the study should hold (default: the grid's size, or {DEFAULT_MAX_EVALS})",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[2020], help="split seeds (default: 2020)")
    parser.add_argument("--storage", default="sqlite:///tune.db", help="Optuna database URL (default: %(default)s)")
    parser.add_argument("--study_name", default=None, help="default: MODEL-DATASET-<hash of the search's settings>")
    parser.add_argument(
        "--pruner",
        choices=["median", "none"],
        default="median",
        help="stop trials whose validation curve is below the median of finished ones (default)",
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="write the best values to ./properties/dataset/DATASET/MODEL.yaml, which runs started in "
        "this folder load (nothing on a tie; never inside an installed package)",
    )
    parser.add_argument(
        "--properties-dir",
        default=str(LOCAL_PROPERTIES_DIR),
        metavar="DIR",
        help="folder --write writes DIR/dataset/DATASET/MODEL.yaml into (default: %(default)s)",
    )
    return parser


def parse_args(argv, prog="run_hyper.py"):
    """(options, {key: value} of the --key=value settings); a usage error ends here, before anything loads."""
    parser = build_parser(prog)
    args, overrides = parse_with_settings(parser, argv, RESERVED_KEYS)
    check_seeds(parser, args.seeds)
    if args.max_evals is not None and args.max_evals < 1:
        parser.error("--max_evals: expected a positive number")
    return args, overrides
