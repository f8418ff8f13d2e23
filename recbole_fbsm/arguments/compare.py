"""``recbole-fbsm compare``'s options (``--help``), read before torch and RecBole load
(``recbole_fbsm.experiments.compare`` runs the comparison)."""

import argparse
from pathlib import Path

from recbole_fbsm.config.checks import SEED_MAX
from recbole_fbsm.config.cli import parse_with_settings

DEFAULT_MODELS = ["FBSM", "UFSM", "ItemKNNCBF", "CoSim", "FM", "DeepFM", "WideDeep", "BPR", "Pop", "Random"]
DEFAULT_SEEDS = [2020, 2021, 2022]
# Set per split by --seeds, or chosen by the command itself: not accepted as --key=value.
RESERVED_KEYS = {
    "seed": "set per split by --seeds",
    "split_seed": "set per split by --seeds (seed = split_seed)",
    "model": "use --models",
    "dataset": "use --dataset",
}

EPILOG = """examples:
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


def build_parser(prog="recbole-fbsm compare") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run a list of models on one dataset over the same random item splits (one per seed)\n"
        "and write a markdown table and a PNG chart of the test metrics (docs/compare.md).",
        epilog=EPILOG,
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


def parse_args(argv, prog="recbole-fbsm compare"):
    parser = build_parser(prog)
    args, overrides = parse_with_settings(parser, argv, RESERVED_KEYS)
    if len(set(args.models)) != len(args.models):
        parser.error("--models: a model is listed twice")
    check_seeds(parser, args.seeds)
    if args.results and Path(args.results).exists() and not Path(args.results).is_dir():
        parser.error(f"--results {args.results}: expected a folder (new, or one to resume); it is a file")
    return args, overrides
