"""The run record, one JSON file per run (``run()``'s result file, ``compare``'s and docs/results' records, the
tuner's trials): built, written, read, and judged here. It carries the ``settings`` it was computed with
(``settings_of``, the code's fingerprint among them) and is reused only under the same ones: changed data, config
files, code or release mean a new run, never an old number."""

import ast
import functools
import hashlib
import json
import os
import subprocess
import traceback
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import yaml
from recbole.utils import get_local_time

from recbole_fbsm.recbole_compat import RECBOLE_LOG_ROOT
from recbole_fbsm.storage.fingerprint import file_sha256
from recbole_fbsm.storage.safe_files import plain, write_atomic

# the hybrid scenario's item groups: "all" is the record's best_valid_result / test_result, the others are kept in
# {valid,test}_result_<group> (absent in the item scenario)
GROUPS = ("all", "cold", "warm")
# the users direction's test rankings in a record's "audience" (who should see a new item), read as groups
USER_GROUPS = {"users": "test_calibrated", "users-raw": "test_raw"}
HYBRID_GROUPS = tuple(f"{phase}_result_{group}" for phase in ("valid", "test") for group in GROUPS[1:])


def package_version():
    try:
        return version("recbole-fbsm")
    except PackageNotFoundError:
        return "unknown"


PACKAGE = Path(__file__).resolve().parents[1]
# what a model's numbers depend on: a record made by other code (beyond docstrings, comments, YAML layout) is stale
RESULT_CODE = ("models", "kernels", "data", "training", "evaluation", "config", "quick_start.py")
# files there that only word messages, suggest names or write the log: a new wording leaves the records current
MESSAGE_CODE = (
    "config/checks.py",
    "config/suggestions.py",
    "config/cli.py",
    "config/datasets.py",
    "training/run_log.py",
)


@functools.cache
def code_fingerprint():
    """SHA-256 of the code and property files that decide a run's numbers: Python files as their syntax trees
    without docstrings, YAML files as their values. Records carry it (``settings_of``): tests say which are stale."""
    digest = hashlib.sha256()
    files = [p for part in RESULT_CODE for p in sorted((PACKAGE / part).rglob("*.py")) or [PACKAGE / part]]
    files = [p for p in files if p.relative_to(PACKAGE).as_posix() not in MESSAGE_CODE]
    properties = PACKAGE / "properties" if (PACKAGE / "properties").is_dir() else PACKAGE.parent / "properties"
    for path in files + sorted(properties.rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".py":
            tree = ast.parse(text)
            for node in ast.walk(tree):
                body = getattr(node, "body", None)
                if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                    if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                        node.body = body[1:] or [ast.Pass()]
            text = ast.dump(tree)
        else:
            text = json.dumps(yaml.safe_load(text), sort_keys=True)
        digest.update(path.relative_to(properties.parent if path.suffix == ".yaml" else PACKAGE).as_posix().encode())
        digest.update(text.encode())
    return digest.hexdigest()


def commit():
    """The git commit of the checkout the package runs from (with "-dirty" for uncommitted changes), or None."""
    try:  # no tag matches: the full commit hash
        return subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40", "--exclude=*"],
            cwd=PACKAGE,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def portable(value):
    """``value`` with every absolute path of this machine made relative: to the working directory when inside it,
    to the recbole package (``recbole:...``) for its example data, else the file's name alone."""
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item) for item in value]
    if not isinstance(value, str) or not os.path.isabs(value):
        return value
    path, here = Path(os.path.normpath(value)), Path.cwd()
    parts = path.parts
    if "recbole" in parts and "site-packages" in parts:
        return "recbole:" + "/".join(parts[parts.index("recbole") + 1 :])
    if path.is_relative_to(here):
        return path.relative_to(here).as_posix()
    return path.name


def settings_of(dataset, config_file_list, overrides, data_sha256):
    """What a stored result must match to be reused; ``data_sha256``: the fingerprint of the files the run reads."""
    return {
        "dataset": str(dataset),
        "config_files": [
            {"path": str(path), "sha256": file_sha256(path) if os.path.isfile(path) else None}
            for path in config_file_list or []
        ],
        "overrides": {k: str(v) for k, v in (overrides or {}).items()},
        "data_sha256": data_sha256,
        "package_version": package_version(),
        "code": code_fingerprint(),
    }


def recorded_with(record, settings):
    """True when ``record`` was made under ``settings`` (records hold them ``portable``: no path of this machine)."""
    return record["settings"] == portable(settings)


def changed_settings(old, new):
    """The names of the settings that differ between two ``settings_of`` results, for messages."""
    names = {
        "data_sha256": "the data",
        "package_version": "the package version",
        "code": "the code",
        "config_files": "config files",
        "overrides": "overrides",
        "dataset": "dataset",
    }
    return [label for key, label in names.items() if (old or {}).get(key) != (new or {}).get(key)]


def run_record(config, result, settings, data, wall_seconds, log_file):
    """The record of one finished run (status ok); ``data``: its ``data_fingerprint`` (each atomic file's sha256)."""
    return {
        "model": config["model"],
        "commit": commit(),
        "seed": config["seed"],
        "split_seed": config.split_seed,
        "settings": settings,
        "data": data,
        "status": "ok",
        "wall_seconds": wall_seconds,
        "valid_metric": str(config["valid_metric"]).lower(),
        # compare's records name the plugin's property files a run loaded (ColdStartConfig.property_files)
        "property_files": [str(path) for path in getattr(config, "property_files", [])],
        "best_valid_score": plain(result.get("best_valid_score")),
        "valid_score_bigger": bool(result.get("valid_score_bigger", True)),
        "best_valid_result": plain(result.get("best_valid_result") or {}),
        "best_epoch": result.get("best_epoch"),  # the epoch kept on validation; -1: the untrained start
        "start_valid_score": plain(result.get("start_valid_score")),
        "test_result": plain(result.get("test_result") or {}),
        # the hybrid scenario's groups (test_result and best_valid_result hold "all"); absent in the item scenario
        **{key: plain(result[key]) for key in HYBRID_GROUPS if key in result},
        "saved_model_file": result.get("saved_model_file"),
        "artifact_file": result.get("artifact_file"),
        "eval_user_sample": result.get("eval_user_sample"),
        "finished_at": datetime.now().isoformat(timespec="seconds"),
        "log_file": str(log_file) if log_file else None,
        "run_id": config["run_id"],
        "config": plain(config.final_config_dict),
    }


def failed_record(model, seed, settings, error, wall_seconds):
    """The record of a run that raised ``error`` (status failed: its message and traceback)."""
    return {
        "model": model,
        "seed": seed,
        "split_seed": seed,
        "settings": settings,
        "status": "failed",
        "error": f"{type(error).__name__}: {error}",
        "traceback": traceback.format_exc(limit=20),
        "wall_seconds": wall_seconds,
        "finished_at": datetime.now().isoformat(timespec="seconds"),
    }


def result_file_for(log_file, config):
    """``log/MODEL/MODEL-DATASET-time-md5.json`` beside ``log/MODEL/MODEL-DATASET-time-md5.log``; when
    the run wrote no log file of its own (a host application, e.g. pytest, owns the logging), the same
    folder with the run id in the name."""
    if log_file:
        return Path(log_file).with_suffix(".json")
    name = f"{config['model']}-{config['dataset']}-{get_local_time()}-{config['run_id']}.json"
    return Path(RECBOLE_LOG_ROOT).resolve() / str(config["model"]) / name


def write_record(path, record):
    """Write the record atomically (a crash never leaves half a file)."""
    write_atomic(path, (json.dumps(portable(record), indent=2, sort_keys=False) + "\n").encode("utf-8"))
    return Path(path)


def read_record(path):
    """The record stored at ``path``, or None when it is missing or not a result record."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and {"model", "seed", "status", "settings"} <= set(record) else None


def record_files(paths):
    """The JSON files under ``paths`` (folders, recursively, and files)."""
    return [f for p in map(Path, paths) for f in (sorted(p.rglob("*.json")) if p.is_dir() else [p])]


def load_records(folder):
    """Every result record of the folder (unreadable or foreign JSON files are left out)."""
    return [record for record in map(read_record, sorted(Path(folder).glob("*.json"))) if record is not None]


def stale_records(paths):
    """The record files under ``paths`` made by other code than this tree's (their ``settings.code``)."""
    return [
        f for f in record_files(paths) if (read_record(f) or {}).get("settings", {}).get("code") != code_fingerprint()
    ]


def group_result(record, group=None):
    """The test metrics of one group of a record: ``None``/"all" is ``test_result`` (the hybrid scenario's ranking of
    all items), "cold"/"warm" the hybrid scenario's ``test_result_<group>``, "users"/"users-raw" the users
    direction's calibrated and raw rankings (``evaluation.audience``)."""
    if group in USER_GROUPS:
        return (record.get("audience") or {}).get(USER_GROUPS[group]) or {}
    return record.get("test_result" if group in (None, "all") else f"test_result_{group}") or {}


def result_groups(records):
    """The groups a table shows: all/cold/warm when a record holds the hybrid scenario's groups, else one (None)."""
    return GROUPS if any(f"test_result_{g}" in r for r in records for g in GROUPS[1:]) else (None,)
