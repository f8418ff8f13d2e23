"""``recbole-fbsm compare`` and ``recbole-fbsm hyper`` (``run_hyper.py``): several runs over item splits, their
options read before torch, RecBole and Optuna load (``recbole_fbsm.experiments`` runs them)."""

import argparse
from pathlib import Path

from recbole_fbsm.config.checks import SEED_MAX
from recbole_fbsm.config.cli import parse_with_settings, typed_command
from recbole_fbsm.config.paths import LOCAL_PROPERTIES_DIR

DEFAULT_MODELS = ["FBSM", "UFSM", "ItemKNNCBF", "CoSim", "FM", "DeepFM", "WideDeep", "BPR", "Pop", "Random"]
DEFAULT_SEEDS = [2020, 2021, 2022]
# Set per split by --seeds, or chosen by the command itself: not accepted as --key=value.
COMPARE_RESERVED_KEYS = {
    "seed": "set per split by --seeds",
    "split_seed": "set per split by --seeds (seed = split_seed)",
    "model": "use --models",
    "dataset": "use --dataset",
}
HYPER_RESERVED_KEYS = {**COMPARE_RESERVED_KEYS, "split_seed": "set per split by --seeds", "model": "use --model"}
# --algo's spellings (RecBole's and Optuna's) and the sampler each one names
ALGOS = {"grid": "grid", "exhaustive": "grid", "tpe": "tpe", "bayes": "tpe", "random": "random"}

COMPARE_EPILOG = """examples:
  recbole-fbsm compare --dataset=ml-100k
  recbole-fbsm compare --dataset=ml-100k --models FBSM CoSim Pop --seeds 2020 2021 --results results/x
  recbole-fbsm compare --dataset=ml-100k --results results/x --epochs=30 --metrics="['Recall','NDCG','Rec','DCG']"

Every other RecBole setting is given as --key=value and passed to every model (seed and split_seed
are set per split by --seeds). Quiet defaults: state=WARNING, show_progress=False; checkpoints go to
RESULTS/saved. Writes RESULTS/MODEL-SEED.json for every (model, seed), RESULTS/table.md (mean +- std
over the splits of every test metric, the validation score and the wall seconds of each run) and
RESULTS/chart.png (mean test Recall@10 and NDCG@10 with std error bars). To resume an interrupted
comparison, run the same command with the same --results: finished pairs with the same dataset,
config files and overrides are not run again (failed ones are retried).

Exit status: 0 when every run succeeded, 1 when some run failed (it is in the table), 2 for a usage
error, an unknown model, or a dataset/setting error raised by the first run."""


def compare_parser(prog="recbole-fbsm compare"):
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run a list of models on one dataset over the same random item splits (one per seed)\n"
        "and write a markdown table and a PNG chart of the test metrics (docs/compare.md).",
        epilog=COMPARE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # --seed=7 or --model=X must not be taken for --seeds / --models
    )
    parser.add_argument("--dataset", "-d", default="ml-100k", help="dataset name (default: %(default)s)")
    parser.add_argument(
        "--models",
        "-m",
        nargs="+",
        default=list(DEFAULT_MODELS),
        metavar="MODEL",
        help=f"models to compare (default: {' '.join(DEFAULT_MODELS)})",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=list(DEFAULT_SEEDS),
        metavar="SEED",
        help="one item split per seed, used as both seed and split_seed "
        f"(default: {' '.join(map(str, DEFAULT_SEEDS))})",
    )
    parser.add_argument(
        "--results",
        default=None,
        metavar="DIR",
        help="results folder (default: results/DATASET-TIMESTAMP); pass an existing one to resume",
    )
    parser.add_argument("--config_files", default=None, help="space-separated yaml files, used by every model")
    return parser


def check_seeds(parser, seeds):
    """compare's and run_hyper's --seeds: each split once, and a seed numpy accepts."""
    if len(set(seeds)) != len(seeds):
        parser.error("--seeds: a seed is listed twice")
    if any(not 0 <= seed <= SEED_MAX for seed in seeds):
        parser.error(f"--seeds: expected integers from 0 to {SEED_MAX} (numpy's seeding); got {seeds}")


def compare_options(argv, prog="recbole-fbsm compare"):
    """(options, {key: value} of the --key=value settings); a usage error ends here, before anything loads."""
    parser = compare_parser(prog)
    args, overrides = parse_with_settings(parser, argv, COMPARE_RESERVED_KEYS)
    if len(set(args.models)) != len(args.models):
        parser.error("--models: a model is listed twice")
    check_seeds(parser, args.seeds)
    if args.results and Path(args.results).exists() and not Path(args.results).is_dir():
        parser.error(f"--results {args.results}: expected a folder (new, or one to resume); it is a file")
    return args, overrides


def compare(argv, prog="recbole-fbsm compare"):
    args, overrides = compare_options(argv, prog)
    from recbole_fbsm.experiments.compare import main

    return main(args, overrides, typed_command(argv, prog))


def hyper_parser(prog="recbole-fbsm hyper"):
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Hyperparameter search on validation, the RecBole way (``run_hyper.py``), on an Optuna study.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
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
        help="finished trials the study should hold (default: the grid's size, or 100)",
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


def hyper(argv, prog="recbole-fbsm hyper"):
    parser = hyper_parser(prog)
    args, overrides = parse_with_settings(parser, argv, HYPER_RESERVED_KEYS)
    check_seeds(parser, args.seeds)
    if args.max_evals is not None and args.max_evals < 1:
        parser.error("--max_evals: expected a positive number")
    args.algo = ALGOS.get(args.algo)
    from recbole_fbsm.experiments.tune import main

    return main(args, overrides, typed_command(argv, prog))
