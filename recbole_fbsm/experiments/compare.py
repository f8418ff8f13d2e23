"""Compare models on one dataset over the same item splits: one command, a markdown table and a chart.

``python -m recbole_fbsm.experiments.compare --dataset=ml-100k --models FBSM CoSim Pop --seeds 2020 2021 --results results/x
[--config_files "a.yaml b.yaml"] [--key=value ...]``

Every (model, seed) pair is one call of :func:`recbole_fbsm.quick_start.run` in this process, with the
model's own property file (``properties/model/NAME.yaml``), the given config files and ``--key=value``
overrides, and ``seed = split_seed = SEED``: every model sees the same item split for a given seed.
Each finished pair is stored as ``<results>/<MODEL>-<SEED>.json`` (written to a temporary file, then
renamed); a later call with the same ``--results`` and the same settings skips the pairs already done.
``table.md`` and ``chart.png`` are rebuilt from every JSON file of the folder at the end.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
import time
import traceback
import warnings
from datetime import datetime
from pathlib import Path

from recbole_fbsm.storage.run_records import (
    changed_settings, plain_record_value, read_record, settings_of, write_record)
from recbole_fbsm.storage.safe_files import write_atomic
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.training.run_log import last_run_log_file
from recbole_fbsm.quick_start import run
from recbole_fbsm.config.cli import settings_from_args
from recbole_fbsm.config.cold_start_config import ColdStartConfig
from recbole_fbsm.config.registry import get_model
from recbole_fbsm.config.checks import SEED_MAX

DEFAULT_MODELS = ["FBSM", "UFSM", "ItemKNNCBF", "CoSim", "FM", "DeepFM", "WideDeep", "BPR", "Pop", "Random"]
# every table shows each model's ratio to these, when they are in it: the strongest simple content baseline
# (ItemKNNCBF, tuned or not) and the paper's cosine
RATIO_BASELINES = ("ItemKNNCBF", "CoSim")
DEFAULT_SEEDS = [2020, 2021, 2022]
# Quiet defaults; any of them can be overridden with --key=value.
QUIET_DEFAULTS = {"state": "WARNING", "show_progress": False}
# Set per split by --seeds, or chosen by the command itself: not accepted as --key=value.
RESERVED_KEYS = {
    "seed": "set per split by --seeds",
    "split_seed": "set per split by --seeds (seed = split_seed)",
    "model": "use --models",
    "dataset": "use --dataset",
}
CHART_METRICS = ("recall@10", "ndcg@10")
TABLE_FILE = "table.md"
CHART_FILE = "chart.png"
CHECKPOINT_SUBDIR = "saved"
ERROR_CHARS_IN_TABLE = 160

EPILOG = """examples:
  python -m recbole_fbsm.experiments.compare --dataset=ml-100k
  python -m recbole_fbsm.experiments.compare --dataset=ml-100k --models FBSM CoSim Pop --seeds 2020 2021 --results results/x
  python -m recbole_fbsm.experiments.compare --dataset=ml-100k --results results/x --epochs=30 --metrics="['Recall','NDCG','Rec','DCG']"

Every other RecBole setting is given as --key=value and passed to every model (seed and split_seed
are set per split by --seeds). Quiet defaults: state=WARNING, show_progress=False; checkpoints go to
RESULTS/saved. Writes RESULTS/MODEL-SEED.json for every (model, seed), RESULTS/table.md (mean +- std
over the splits of every test metric, the validation score and the wall seconds of each run) and
RESULTS/chart.png (mean test Recall@10 and NDCG@10 with std error bars). To resume an interrupted
comparison, run the same command with the same --results: finished pairs with the same dataset,
config files and overrides are not run again (failed ones are retried).

Exit status: 0 when every run succeeded, 1 when some run failed (it is in the table), 2 for a usage
error, an unknown model, or a dataset/setting error raised by the first run."""


# ------------------------------------------------------------------------------------ command line
def build_parser(prog="python -m recbole_fbsm.experiments.compare") -> argparse.ArgumentParser:
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
        "--models", "-m", nargs="+", default=list(DEFAULT_MODELS), metavar="MODEL",
        help="models to compare (default: %s)" % " ".join(DEFAULT_MODELS),
    )
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=list(DEFAULT_SEEDS), metavar="SEED",
        help="one item split per seed, used as both seed and split_seed (default: %s)"
        % " ".join(map(str, DEFAULT_SEEDS)),
    )
    parser.add_argument(
        "--results", default=None, metavar="DIR",
        help="results folder (default: results/DATASET-TIMESTAMP); pass an existing one to resume",
    )
    parser.add_argument("--config_files", default=None, help="space-separated yaml files, used by every model")
    return parser


def parse_args(argv, prog="python -m recbole_fbsm.experiments.compare"):
    parser = build_parser(prog)
    args, rest = parser.parse_known_args(argv)
    overrides = settings_from_args(parser, rest, RESERVED_KEYS)
    if len(set(args.models)) != len(args.models):
        parser.error("--models: a model is listed twice")
    if len(set(args.seeds)) != len(args.seeds):
        parser.error("--seeds: a seed is listed twice")
    if any(not 0 <= seed <= SEED_MAX for seed in args.seeds):
        parser.error(f"--seeds: expected integers from 0 to {SEED_MAX} (numpy's seeding); got {args.seeds}")
    if args.results and Path(args.results).exists() and not Path(args.results).is_dir():
        parser.error(f"--results {args.results}: expected a folder (new, or one to resume); it is a file")
    return args, overrides


def default_results_dir(dataset):
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(dataset)).name) or "dataset"
    return Path("results") / f"{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


# ----------------------------------------------------------------------------------------- records
def record_path(results_dir, model, seed):
    return Path(results_dir) / f"{model}-{seed}.json"


_plain = plain_record_value


def load_records(results_dir):
    """Every result record of the folder (unreadable or foreign JSON files are left out)."""
    records = []
    for path in sorted(Path(results_dir).glob("*.json")):
        record = read_record(path)
        if record is not None:
            records.append(record)
    return records


def _config_facts(model, dataset, config_file_list, config_dict):
    """The ``valid_metric`` this run was selected on (the model's yaml or the user's files may change it)
    and the plugin's property files that were applied (overall, dataset, model, dataset/model)."""
    try:
        config = ColdStartConfig(model=model, dataset=dataset, config_file_list=config_file_list, config_dict=config_dict)
        return str(config["valid_metric"]).lower(), list(config.property_files)
    except Exception:  # only labels for the table
        return None, []


# ------------------------------------------------------------------------------------------ running
def run_pair(model, dataset, seed, results_dir, config_file_list, overrides, settings, raise_setting_errors=False):
    """One call of run(); returns the record (status ok or failed). With ``raise_setting_errors`` a
    ColdStartError (bad dataset or setting) propagates instead of being recorded."""
    config_dict = dict(QUIET_DEFAULTS)
    config_dict["checkpoint_dir"] = str(Path(results_dir) / CHECKPOINT_SUBDIR)
    config_dict.update(overrides or {})
    config_dict.update(seed=seed, split_seed=seed)
    record = {"model": model, "seed": seed, "split_seed": seed, "settings": settings}
    start = time.perf_counter()
    try:
        result = run(model, dataset, config_file_list=config_file_list, config_dict=dict(config_dict))
    except Exception as error:  # recorded; the comparison goes on with the other models
        if raise_setting_errors and isinstance(error, ColdStartError):
            raise
        record.update(
            status="failed",
            error=f"{type(error).__name__}: {error}",
            traceback=traceback.format_exc(limit=20),
            wall_seconds=time.perf_counter() - start,
        )
    else:
        valid_metric, property_files = _config_facts(model, dataset, config_file_list, config_dict)
        record.update(
            status="ok",
            wall_seconds=time.perf_counter() - start,
            valid_metric=valid_metric,
            property_files=property_files,
            log_file=last_run_log_file(),
            best_valid_score=_plain(result.get("best_valid_score")),
            valid_score_bigger=bool(result.get("valid_score_bigger", True)),
            best_valid_result=_plain(result.get("best_valid_result") or {}),
            test_result=_plain(result.get("test_result") or {}),
            saved_model_file=result.get("saved_model_file"),
            eval_user_sample=result.get("eval_user_sample"),
        )
    record["finished_at"] = datetime.now().isoformat(timespec="seconds")
    return record


def _short_result(record):
    test = record.get("test_result") or {}
    shown = [k for k in CHART_METRICS if k in test] or list(test)[:2]
    return " ".join(f"{k}={test[k]:.4f}" for k in shown)


def compare(
    models=None,
    dataset="ml-100k",
    seeds=None,
    results_dir=None,
    config_file_list=None,
    overrides=None,
    command=None,
    log=print,
):
    """Run every (model, seed) pair not already done in ``results_dir`` and rebuild the table and chart.

    Returns a dict: results_dir, table (path), chart (path or None), ran / skipped / failed (lists of
    (model, seed)) and records (those in the table). Raises ColdStartError for an unknown model, and
    for a dataset/setting error raised by the first run of this call.
    """
    models = list(DEFAULT_MODELS if models is None else models)
    seeds = [int(s) for s in (DEFAULT_SEEDS if seeds is None else seeds)]
    overrides = dict(overrides or {})
    config_file_list = list(config_file_list) if config_file_list else None
    for model in models:  # a typo in a model name should not wait for the other models to finish
        get_model(model)
    results_dir = Path(results_dir) if results_dir is not None else default_results_dir(dataset)
    settings = settings_of(dataset, config_file_list, overrides)

    created = not results_dir.exists()
    results_dir.mkdir(parents=True, exist_ok=True)
    log(f"results folder: {results_dir}")

    pairs = [(model, seed) for seed in seeds for model in models]  # split by split: whole splits first
    ran, skipped, failed = [], [], []
    first_run = True
    width = max(len(m) for m in models)
    for index, (model, seed) in enumerate(pairs, 1):
        prefix = f"[{index}/{len(pairs)}] {model:<{width}} seed {seed}"
        path = record_path(results_dir, model, seed)
        if _reusable(read_record(path), settings, prefix, log):
            skipped.append((model, seed))
            continue
        try:
            # A bad dataset or setting in the first run would fail the same way for every model: stop.
            record = run_pair(model, dataset, seed, results_dir, config_file_list, overrides, settings,
                              raise_setting_errors=first_run)
        except ColdStartError:
            if created:
                _remove_empty_tree(results_dir)
            raise
        first_run = False
        write_record(path, record)
        ran.append((model, seed))
        if record["status"] == "ok":
            log(f"{prefix}: {record['wall_seconds']:.1f} s  {_short_result(record)}")
        else:
            failed.append((model, seed))
            log(f"{prefix}: FAILED after {record['wall_seconds']:.1f} s: {record['error']}")

    report = write_report(results_dir, settings, models, command=command, log=log)
    report.update(results_dir=results_dir, ran=ran, skipped=skipped, failed=failed)
    return report


def _reusable(old, settings, prefix, log):
    """True when the stored record ``old`` holds a finished run with these settings (data included); else
    says why the pair runs again."""
    if old is not None and old["settings"] == settings and old["status"] == "ok":
        log(f"{prefix}: done before, skipped ({_short_result(old)})")
        return True
    if old is not None and old["settings"] != settings:
        changed = ", ".join(changed_settings(old["settings"], settings)) or "settings"
        log(f"{prefix}: stored result differs in {changed}: running again (it will be replaced)")
    elif old is not None:
        log(f"{prefix}: failed before: running again")
    return False


def _remove_empty_tree(folder):
    """Remove ``folder`` if it holds nothing but empty folders (only what this call created)."""
    folder = Path(folder)
    for sub in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if sub.is_dir():
            try:
                sub.rmdir()
            except OSError:
                return
        else:
            return
    try:
        folder.rmdir()
    except OSError:
        pass


# ------------------------------------------------------------------------------------------ report
def mean_std(values):
    """Mean and sample standard deviation (n - 1); the deviation of a single value is 0."""
    values = [float(v) for v in values]
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, std


def _cell(values, digits=4):
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    mean, std = mean_std(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _escape(text, limit=ERROR_CHARS_IN_TABLE):
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("|", "\\|")


def summarise(records, models_first=()):
    """Group the records by model: rows in the order of ``models_first``, then the others by name."""
    by_model = {}
    for record in records:
        by_model.setdefault(record["model"], []).append(record)
    order = [m for m in models_first if m in by_model] + sorted(m for m in by_model if m not in models_first)
    rows = []
    for model in order:
        group = sorted(by_model[model], key=lambda r: r["seed"])
        ok = [r for r in group if r["status"] == "ok"]
        rows.append({"model": model, "records": group, "ok": ok, "failed": [r for r in group if r["status"] != "ok"]})
    return rows


def build_table(rows, settings, command=None):
    ok_records = [r for row in rows for r in row["ok"]]
    metrics = []
    for record in ok_records:
        metrics += [k for k in record.get("test_result", {}) if k not in metrics]
    valid_metrics = {r.get("valid_metric") for r in ok_records}
    same_valid = len(valid_metrics) == 1 and None not in valid_metrics
    valid_header = f"valid {valid_metrics.copy().pop()}" if same_valid else "valid score"
    seeds = sorted({r["seed"] for row in rows for r in row["records"]})

    lines = [f"# Model comparison on {settings['dataset']}", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    files = ", ".join(f"`{f['path']}`" for f in settings["config_files"]) or "none"
    overrides = " ".join(f"`--{k}={v}`" for k, v in settings["overrides"].items()) or "none"
    lines += [
        f"Item splits (seed = split_seed): {', '.join(map(str, seeds))}. Your config files: {files}. "
        f"Overrides: {overrides}.",
        "",
        *property_file_lines(rows),
        "Cells: mean ± standard deviation over the splits (sample std, n − 1; 0 for a single split). "
        f"Metrics on the test items; `{valid_header}`: the validation score of the epoch kept "
        "(best on validation); `time (s)`: wall seconds of one run (load, split, train, evaluate).",
        "",
    ]
    ratio_metric = _ratio_metric(metrics, valid_metrics)
    baselines = [b for b in RATIO_BASELINES if any(row["model"] == b and row["ok"] for row in rows)] if ratio_metric else []
    ratio_headers = [f"{ratio_metric} / {b}" for b in baselines]
    header = ["model", "splits", valid_header, *metrics, *ratio_headers, "time (s)", "status"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 2) + ["---"]) + "|")
    baseline_rows = [next(r for r in rows if r["model"] == b) for b in baselines]
    for row in rows:
        lines.append(_table_row(row, metrics, same_valid, baseline_rows, ratio_metric))
    failures = [r for row in rows for r in row["failed"]]
    if baselines:
        lines += ["", f"`{ratio_metric} / MODEL`: the mean over the splits of the per-split ratio of the test "
                  f"{ratio_metric} to that model's on the same split (each split's ratio in brackets)."]
    if failures:
        lines += ["", "Failed runs (full messages and tracebacks in the JSON files):", ""]
        for r in failures:
            lines.append(f"- {r['model']}, seed {r['seed']}: {_escape(r.get('error', ''), limit=1000)}")
    return "\n".join(lines) + "\n"


def _table_row(row, metrics, same_valid, baseline_rows, ratio_metric):
    """One model's line of the table: splits, validation score, test metrics, ratios, time, status."""
    ok, failed = row["ok"], row["failed"]
    splits = f"{len(ok)}" if not failed else f"{len(ok)}/{len(row['records'])}"
    if ok:
        valid = _cell([r.get("best_valid_score") for r in ok])
        if not same_valid:
            valid += f" ({', '.join(sorted({str(r.get('valid_metric')) for r in ok}))})"
        cells = [_cell([r["test_result"].get(m) for r in ok if m in r["test_result"]]) for m in metrics]
        time_cell = _cell([r.get("wall_seconds") for r in ok], digits=1)
    else:
        valid, cells, time_cell = "–", ["–"] * len(metrics), "–"
    samples = sorted({int(r["eval_user_sample"]) for r in ok if r.get("eval_user_sample")})
    if not failed:
        status = "ok" + (f"; evaluated on {', '.join(map(str, samples))} random users per split" if samples else "")
    else:
        which = ", ".join(str(r["seed"]) for r in failed)
        status = _escape(f"failed (seed {which}): {failed[0].get('error', 'unknown error')}")
    ratios = [ratio_cell(row, baseline_row, ratio_metric) for baseline_row in baseline_rows]
    return "| " + " | ".join([row["model"], splits, valid, *cells, *ratios, time_cell, status]) + " |"


def _ratio_metric(metrics, valid_metrics):
    """The test metric the ratio columns compare: the validation metric's, else the first one."""
    valid = {str(v).lower() for v in valid_metrics if v}
    same = [m for m in metrics if m.lower() in valid]
    return same[0] if same else (metrics[0] if metrics else None)


def ratio_cell(row, baseline_row, metric):
    """Mean of the per-split ratios row / baseline of ``metric`` on the splits both have, and each ratio."""
    base = {r["seed"]: r["test_result"].get(metric) for r in baseline_row["ok"]}
    ratios = [r["test_result"][metric] / base[r["seed"]] for r in row["ok"]
              if metric in r["test_result"] and base.get(r["seed"])]
    if not ratios:
        return "–"
    mean = sum(ratios) / len(ratios)
    return f"{mean:.3f} ({', '.join(f'{v:.3f}' for v in ratios)})"


def build_chart(rows, path, dataset):
    """Grouped bars of the mean test Recall@10 and NDCG@10 of each model, with std error bars."""
    from matplotlib.figure import Figure  # a bare Figure renders with Agg; pyplot's backend is left alone

    rows = [row for row in rows if row["ok"]]
    if not rows:
        return None
    available = []
    for row in rows:
        for record in row["ok"]:
            available += [k for k in record["test_result"] if k not in available]
    metrics = [m for m in CHART_METRICS if m in available] or available[:2]
    if not metrics:
        return None
    figure = Figure(figsize=(max(6.0, 0.9 * len(rows) + 2.5), 4.5), dpi=150)
    figure.set_canvas(_agg_canvas(figure))
    axes = figure.add_subplot(1, 1, 1)
    width = 0.8 / len(metrics)
    n_splits = set()
    for k, metric in enumerate(metrics):
        means, stds = [], []
        for row in rows:
            values = [r["test_result"][metric] for r in row["ok"] if metric in r["test_result"]]
            n_splits.add(len(values))
            mean, std = mean_std(values) if values else (0.0, 0.0)
            means.append(mean)
            stds.append(std)
        positions = [i + (k - (len(metrics) - 1) / 2) * width for i in range(len(rows))]
        axes.bar(positions, means, width, yerr=stds, capsize=3, label=_metric_label(metric))
    axes.set_xticks(range(len(rows)))
    axes.set_xticklabels([row["model"] for row in rows], rotation=30, ha="right")
    axes.set_ylabel("test score (mean over splits)")
    splits = "/".join(str(n) for n in sorted(n_splits))
    axes.set_title(f"{dataset}: item cold start, {splits} split(s), error bars: std")
    axes.legend()
    axes.grid(axis="y", alpha=0.3)
    axes.set_axisbelow(True)
    figure.tight_layout()
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    write_atomic(path, buffer.getvalue())
    return Path(path)


def _agg_canvas(figure):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return FigureCanvasAgg(figure)


def _metric_label(metric):
    name, _, k = metric.partition("@")
    known = {"recall": "Recall", "ndcg": "NDCG", "precision": "Precision", "hit": "Hit", "mrr": "MRR",
             "rec": "Rec", "dcg": "DCG"}
    return f"{known.get(name, name)}@{k}" if k else known.get(name, name)


def property_file_lines(rows):
    """Per model, the plugin's property files its runs loaded (before your config files and overrides)."""
    lines = []
    for row in rows:
        loaded = []
        for record in row["ok"]:
            loaded += [p for p in record.get("property_files") or [] if p not in loaded]
        if loaded:
            lines.append(f"- {row['model']}: " + ", ".join(f"`{p}`" for p in loaded))
    if not lines:
        return []
    return ["Property files loaded (lowest priority first; your config files and overrides come after):", "", *lines, ""]


def write_report(results_dir, settings, models_first=(), command=None, log=print):
    """Rebuild table.md and chart.png from the folder's JSON files recorded with ``settings``."""
    results_dir = Path(results_dir)
    records = load_records(results_dir)
    kept = [r for r in records if r["settings"] == settings]
    other = [r for r in records if r["settings"] != settings]
    if other:
        names = ", ".join(f"{r['model']}-{r['seed']}" for r in other)
        log(f"left out of the table: {len(other)} result(s) recorded with other settings ({names})")
    rows = summarise(kept, models_first)
    table_path = results_dir / TABLE_FILE
    table = build_table(rows, settings, command=command)
    write_atomic(table_path, table.encode("utf-8"))
    chart_path = build_chart(rows, results_dir / CHART_FILE, settings["dataset"])
    return {"table": table_path, "chart": chart_path, "records": kept, "markdown": table}


# -------------------------------------------------------------------------------------------- main
def main(argv=None, prog="python -m recbole_fbsm.experiments.compare"):
    argv = sys.argv[1:] if argv is None else list(argv)
    args, overrides = parse_args(argv, prog)
    config_files = args.config_files.split() if args.config_files else None
    results_dir = Path(args.results) if args.results else default_results_dir(args.dataset)
    command_argv = list(argv) if args.results else [*argv, f"--results={results_dir}"]
    command = shlex.join(["python", "-m", "recbole_fbsm.experiments.compare", *command_argv])
    with warnings.catch_warnings():
        # RecBole 1.2.1 on pandas 2 / torch 2 warns about its own code at every run: noise on the console.
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            report = compare(
                args.models, args.dataset, args.seeds, results_dir, config_files, overrides, command=command,
            )
        except ColdStartError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"\ninterrupted: run the same command with --results={results_dir} to resume", file=sys.stderr)
            return 130
    print()
    print(report["markdown"], end="")
    print()
    print(f"table: {report['table']}")
    if report["chart"] is not None:
        print(f"chart: {report['chart']}")
    print(f"results folder: {results_dir} ({len(report['ran'])} run, {len(report['skipped'])} done before, "
          f"{len(report['failed'])} failed)")
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
