"""The result file of a run: metrics, settings and checkpoint as JSON beside the run's log.

Why: the metrics of a `run_recbole.py` run were only on the console and inside the log. The record has
the schema of `recbole-fbsm compare`'s per-run files (``compare.run_pair``), so a result
file can be read with ``compare.read_record`` and dropped into a comparison's results folder; it adds
``log_file``, ``run_id`` and the run's final ``config``.
"""

from datetime import datetime
from pathlib import Path

from recbole.utils import get_local_time

from recbole_fbsm.storage.fingerprint import config_fingerprint
from recbole_fbsm.storage.run_records import plain_record_value as _plain
from recbole_fbsm.storage.run_records import settings_of, write_record
from recbole_fbsm.training.run_log import RECBOLE_LOG_ROOT

HYBRID_GROUPS = ("valid_result_cold", "valid_result_warm", "test_result_cold", "test_result_warm")


def result_file_for(log_file, config):
    """``log/MODEL/MODEL-DATASET-time-md5.json`` beside ``log/MODEL/MODEL-DATASET-time-md5.log``; when
    the run wrote no log file of its own (a host application, e.g. pytest, owns the logging), the same
    folder with the run id in the name."""
    if log_file:
        return Path(log_file).with_suffix(".json")
    name = f"{config['model']}-{config['dataset']}-{get_local_time()}-{config['run_id']}.json"
    return Path(RECBOLE_LOG_ROOT).resolve() / str(config["model"]) / name


def run_record(config, result, config_file_list, config_dict, wall_seconds, log_file=None):
    """compare's record of one finished run (status ok), plus the log file, run id and final config."""
    return {
        "model": config["model"],
        "seed": config["seed"],
        "split_seed": config.split_seed,
        "settings": settings_of(config["dataset"], config_file_list, config_dict),
        "data": config_fingerprint(config),  # each atomic file's sha256: what the numbers were computed on
        "status": "ok",
        "wall_seconds": wall_seconds,
        "valid_metric": str(config["valid_metric"]).lower(),
        # compare's records name the plugin's property files a run loaded (ColdStartConfig.property_files)
        "property_files": [str(path) for path in getattr(config, "property_files", [])],
        "best_valid_score": _plain(result.get("best_valid_score")),
        "valid_score_bigger": bool(result.get("valid_score_bigger", True)),
        "best_valid_result": _plain(result.get("best_valid_result") or {}),
        "best_epoch": result.get("best_epoch"),  # the epoch kept on validation; -1: the untrained start
        "start_valid_score": _plain(result.get("start_valid_score")),
        "test_result": _plain(result.get("test_result") or {}),
        # the hybrid scenario's groups (test_result and best_valid_result hold "all"); absent in the item scenario
        **{key: _plain(result[key]) for key in HYBRID_GROUPS if key in result},
        "saved_model_file": result.get("saved_model_file"),
        "artifact_file": result.get("artifact_file"),
        "eval_user_sample": result.get("eval_user_sample"),
        "finished_at": datetime.now().isoformat(timespec="seconds"),
        "log_file": str(log_file) if log_file else None,
        "run_id": config["run_id"],
        "config": {str(key): _plain(value) for key, value in config.final_config_dict.items()},
    }


def write_result_file(path, record):
    """Write the record atomically (a crash never leaves half a file)."""
    write_record(path, record)
    return Path(path)
