"""Grid search on the validation split, built on ``run()``; the best values go to ``recbole_fbsm/properties/dataset/DATASET/MODEL.yaml``.

``python -m recbole_fbsm.tune --model=FBSM --dataset=citeulike-t [--grid "reg_V=[0.01, 0.1]" ...]
[--seeds 2020] [--results results/tune-FBSM-citeulike-t] [--write] [--key=value ...]``

The grid comes from ``--grid KEY=LIST`` options, or else from ``recbole_fbsm/properties/grids/<MODEL>.yaml``. Every
combination runs once per seed (``seed = split_seed``) with :func:`recbole_fbsm.quick_start.run`; each
trial is stored as ``<results>/trial-<hash>-<seed>.json`` so an interrupted search resumes where it
stopped. A combination's score is the mean over the seeds of its best validation score
(``valid_metric``); test metrics are recorded for the report but never used to choose. ``--write``
writes the winner to ``recbole_fbsm/properties/dataset/<DATASET>/<MODEL>.yaml``, which ``ColdStartConfig`` loads after
the model's own file (and before the user's files and ``--key=value`` settings).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import statistics
import sys
import warnings
from datetime import datetime
from pathlib import Path

import yaml

from recbole_fbsm.cli import settings_from_args
from recbole_fbsm.compare import read_record, run_pair, settings_of, write_atomic, write_record
from recbole_fbsm.config import PROPERTIES_DIR, tuned_properties_file
from recbole_fbsm.errors import ColdStartError

RESERVED_KEYS = {"seed": "set per split by --seeds", "split_seed": "set per split by --seeds",
                 "model": "use --model", "dataset": "use --dataset"}


def grid_file(model):
    return PROPERTIES_DIR / "grids" / f"{model}.yaml"


def parse_grid(items):
    """``["reg_V=[0.1, 1]", "rank=5"]`` -> ``{"reg_V": [0.1, 1], "rank": [5]}`` (values parsed as YAML)."""
    grid = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ColdStartError(f"--grid {item!r}: expected KEY=VALUE or KEY=[V1, V2, ...]")
        values = yaml.safe_load(text)
        grid[key.strip()] = values if isinstance(values, list) else [values]
        if not grid[key.strip()]:
            raise ColdStartError(f"--grid {item!r}: the list of values is empty")
    return grid


def load_grid(model, items=None):
    if items:
        return parse_grid(items)
    path = grid_file(model)
    if not path.is_file():
        raise ColdStartError(f"no --grid given and no grid file {path} for model {model!r}.")
    grid = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(grid, dict) or not grid:
        raise ColdStartError(f"{path}: expected a mapping KEY: [values, ...].")
    return {key: values if isinstance(values, list) else [values] for key, values in grid.items()}


def combinations(grid):
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def params_id(params):
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:10]


def tune(model, dataset, grid, seeds=(2020,), results_dir=None, overrides=None, log=print):
    """Run every combination of ``grid`` on every seed (resuming stored trials); returns the ranked
    summaries: [{"params", "valid", "valid_per_seed", "test", ...}], best first."""
    results_dir = Path(results_dir or Path("results") / f"tune-{model}-{Path(str(dataset)).name}")
    settings = settings_of(dataset, None, overrides)
    trials = []
    for params in combinations(grid):
        for seed in seeds:
            path = results_dir / f"trial-{params_id(params)}-{seed}.json"
            record = read_record(path)
            if record is None or record.get("status") != "ok" or record.get("settings") != settings:
                run_overrides = dict(overrides or {})
                run_overrides.update({k: str(v) for k, v in params.items()})
                record = run_pair(model, dataset, seed, results_dir, None, run_overrides, settings,
                                  raise_setting_errors=True)
                record["params"] = params
                write_record(path, record)
            trials.append(record)
            if record["status"] == "ok":
                log(f"{model} {params} seed {seed}: valid {record['valid_metric']} {record['best_valid_score']:.4f}"
                    f" ({record['wall_seconds']:.0f} s)")
            else:
                log(f"{model} {params} seed {seed}: FAILED {record['error']}")
    return summarise(trials)


def summarise(trials):
    by_params = {}
    for record in trials:
        by_params.setdefault(json.dumps(record["params"], sort_keys=True, default=str), []).append(record)
    rows = []
    for key, records in by_params.items():
        ok = [r for r in records if r["status"] == "ok"]
        if len(ok) != len(records):
            continue
        bigger = ok[0]["valid_score_bigger"]
        valid = [r["best_valid_score"] for r in ok]
        test_metric = ok[0]["valid_metric"]
        rows.append({
            "params": ok[0]["params"],
            "valid_metric": test_metric,
            "valid": statistics.mean(valid),
            "valid_per_seed": valid,
            "test": statistics.mean(r["test_result"].get(test_metric, float("nan")) for r in ok),
            "seconds": statistics.mean(r["wall_seconds"] for r in ok),
            "bigger": bigger,
        })
    rows.sort(key=lambda row: row["valid"], reverse=bool(rows and rows[0]["bigger"]))
    return rows


def report(rows, model, dataset, seeds):
    lines = [f"Grid search for {model} on {dataset}, seeds {list(seeds)}: mean best validation score "
             "(selection) and the test score of the same runs (not used to select).", "",
             "| rank | params | valid | test | s/run |", "|---|---|---|---|---|"]
    for position, row in enumerate(rows, 1):
        params = ", ".join(f"{k}={v}" for k, v in row["params"].items())
        lines.append(f"| {position} | {params} | {row['valid']:.4f} | {row['test']:.4f} | {row['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def write_tuned(model, dataset, best, seeds, grid, command):
    """Write (or update) ``recbole_fbsm/properties/dataset/DATASET/MODEL.yaml`` with the best values; other keys of
    an existing file (e.g. a cost cap set by hand) are kept."""
    path = tuned_properties_file(model, dataset)
    values = {}
    if path.is_file():
        values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    values.update(best["params"])
    header = (
        f"# {model} on {dataset}: {', '.join(best['params'])} chosen by validation {best['valid_metric']} "
        f"(mean {best['valid']:.4f} over split seeds {list(seeds)}),\n"
        f"# written {datetime.now().strftime('%Y-%m-%d')} by: {command}\n"
        f"# grid: {json.dumps(grid, default=str)}\n"
    )
    write_atomic(path, (header + yaml.safe_dump(values, sort_keys=False)).encode("utf-8"))
    return path


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m recbole_fbsm.tune", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("--model", "-m", required=True)
    parser.add_argument("--dataset", "-d", default="ml-100k")
    parser.add_argument("--grid", nargs="+", metavar="KEY=LIST",
                        help='values to try, e.g. "reg_V=[0.01, 0.1]" (default: recbole_fbsm/properties/grids/MODEL.yaml)')
    parser.add_argument("--seeds", nargs="+", type=int, default=[2020], help="split seeds (default: 2020)")
    parser.add_argument("--results", help="folder of trial records (default: results/tune-MODEL-DATASET)")
    parser.add_argument("--write", action="store_true",
                        help="write the best values to recbole_fbsm/properties/dataset/DATASET/MODEL.yaml")
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    overrides = settings_from_args(parser, rest, RESERVED_KEYS)
    try:
        grid = load_grid(args.model, args.grid)
        with warnings.catch_warnings():  # RecBole's pandas and torch deprecation noise, once per trial
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            rows = tune(args.model, args.dataset, grid, args.seeds, args.results, overrides)
    except ColdStartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not rows:
        print("error: no combination finished on every seed", file=sys.stderr)
        return 1
    table = report(rows, args.model, args.dataset, args.seeds)
    results_dir = Path(args.results or Path("results") / f"tune-{args.model}-{Path(str(args.dataset)).name}")
    write_atomic(results_dir / "tuning.md", table.encode("utf-8"))
    print(table)
    print(f"results: {results_dir}")
    if args.write:
        command = "python -m recbole_fbsm.tune " + " ".join(argv)
        print(f"best: {rows[0]['params']} -> {write_tuned(args.model, args.dataset, rows[0], args.seeds, grid, command)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
