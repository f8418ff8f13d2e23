"""Compare models on one dataset over the same item splits (``seed = split_seed``), one JSON record per (model,
seed), resumable; the table and chart are rebuilt from the folder's records (``report``; docs/compare.md)."""

import shlex
import time
from datetime import datetime
from pathlib import Path

from recbole_fbsm.config.registry import get_model
from recbole_fbsm.errors import ColdStartError, exit_status
from recbole_fbsm.experiments.report import shown_metrics, write_report
from recbole_fbsm.quick_start import planned_settings, run
from recbole_fbsm.storage.run_records import (
    changed_settings,
    failed_record,
    group_result,
    portable,
    read_record,
    recorded_with,
    result_groups,
    write_record,
)
from recbole_fbsm.training.run_log import last_run_log_file

QUIET_DEFAULTS = {"state": "WARNING", "show_progress": False}
CHECKPOINT_SUBDIR = "saved"


def default_results_dir(dataset):
    return Path("results") / f"{Path(str(dataset)).name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def run_pair(model, dataset, seed, results_dir, config_file_list, overrides, settings, raising=()):
    """One run on split ``seed`` (compare's, a trial's, a record's rerun): its record (status ok or failed; an error
    of a type in ``raising`` is raised instead)."""
    config_dict = {
        **QUIET_DEFAULTS,
        "checkpoint_dir": str(Path(results_dir) / CHECKPOINT_SUBDIR),
        **(overrides or {}),
        "seed": seed,
        "split_seed": seed,
    }
    start = time.perf_counter()
    try:
        result = run(model, dataset, config_file_list=config_file_list, config_dict=config_dict)
    except Exception as error:  # recorded; the comparison goes on with the other models
        if isinstance(error, raising):
            raise
        return failed_record(model, seed, settings, error, time.perf_counter() - start)
    # the run's own record (quick_start.run builds it once), under this comparison's settings
    return {
        **result["record"],
        "settings": settings,
        "wall_seconds": time.perf_counter() - start,
        "log_file": result["record"].get("log_file") or last_run_log_file(),
        "finished_at": datetime.now().isoformat(timespec="seconds"),
    }


def _short_result(record):
    """The console's figures of a run: Recall@10 and NDCG@10 (the hybrid scenario: the first for all/cold/warm)."""
    test, groups = record.get("test_result") or {}, result_groups([record])
    shown = shown_metrics(test)
    if groups == (None,) or not shown:
        return " ".join(f"{k}={test[k]:.4f}" for k in shown)
    values = [group_result(record, g).get(shown[0]) for g in groups]
    return f"{shown[0]} {'/'.join(groups)}=" + "/".join("–" if v is None else f"{v:.4f}" for v in values)


def compare(
    models,
    dataset,
    seeds,
    results_dir=None,
    config_file_list=None,
    overrides=None,
    command=None,
    log=print,
    resume=None,
):
    """Run every (model, seed) pair not done in ``results_dir`` (split by split) and rebuild the table and chart; the
    report's dict and results_dir, ran / skipped / failed ((model, seed) lists). A ColdStartError of the first run
    stops it."""
    for model in models:  # a typo in a model name should not wait for the other models to finish
        get_model(model)
    results_dir = Path(results_dir) if results_dir is not None else default_results_dir(dataset)
    config_file_list, overrides = list(config_file_list or []) or None, dict(overrides or {})
    settings = planned_settings(models[0], dataset, config_file_list, overrides)
    results_dir.mkdir(parents=True, exist_ok=True)
    log(f"results folder: {results_dir}")
    pairs = [(model, int(seed)) for seed in seeds for model in models]
    done = {"ran": [], "skipped": [], "failed": []}
    for index, (model, seed) in enumerate(pairs, 1):
        prefix = f"[{index}/{len(pairs)}] {model:<{max(map(len, models))}} seed {seed}"
        path = results_dir / f"{model}-{seed}.json"
        old = read_record(path)
        if old is not None and recorded_with(old, settings) and old["status"] == "ok":
            log(f"{prefix}: done before, skipped ({_short_result(old)})")
            done["skipped"].append((model, seed))
            continue
        if old is not None:
            changed = ", ".join(changed_settings(old["settings"], portable(settings)))
            log(f"{prefix}: {'stored result differs in ' + changed if changed else 'failed before'}: running again")
        # a bad dataset or setting in the first run would fail the same way for every model: stop
        stopping = () if done["ran"] else (ColdStartError,)
        record = run_pair(model, dataset, seed, results_dir, config_file_list, overrides, settings, stopping)
        write_record(path, record)
        done["ran"].append((model, seed))
        if record["status"] == "ok":
            log(f"{prefix}: {record['wall_seconds']:.1f} s  {_short_result(record)}")
        else:
            done["failed"].append((model, seed))
            log(f"{prefix}: FAILED after {record['wall_seconds']:.1f} s: {record['error']}")
    report = write_report(results_dir, settings, models, command=command, log=log, resume=resume)
    return {**report, "results_dir": results_dir, **done}


def main(args, overrides, command):
    """``recbole-fbsm compare``, its options read by recbole_fbsm.cli: the comparison, resumable from its folder."""
    results_dir = Path(args.results) if args.results else default_results_dir(args.dataset)
    return exit_status(
        lambda: _main(args, overrides, command, results_dir),
        f"\ninterrupted: run the same command with --results={results_dir} to resume",
    )


def _main(args, overrides, command, results_dir):
    """Compare, print the table and say where everything is (the folder chosen apart from ``command``, to resume)."""
    config_files = args.config_files.split() if args.config_files else None
    resume = None if args.results else f"the same command with --results={shlex.quote(str(results_dir))}"
    report = compare(
        args.models, args.dataset, args.seeds, results_dir, config_files, overrides, command, resume=resume
    )
    print(f"\n{report['markdown']}\ntable: {report['table']}")
    if report["chart"] is not None:
        print(f"chart: {report['chart']}")
    print(
        f"results folder: {results_dir} ({len(report['ran'])} run, {len(report['skipped'])} done before, "
        f"{len(report['failed'])} failed)"
    )
    return 1 if report["failed"] else 0
