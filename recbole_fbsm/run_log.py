"""Each run its own RecBole log: folders made without a race, a run id in the log's name, and the
previous run's handlers closed when one process runs several (``compare``, ``tune``, notebooks)."""

import glob
import hashlib
import logging
import os
import uuid
from contextlib import contextmanager

from recbole.utils import init_logger

RECBOLE_LOG_ROOT = "./log"  # hard-coded in recbole.utils.init_logger

_handlers_of_last_run = []


def make_run_dirs(config):
    """Create the folders RecBole would create with a check-then-``makedirs`` (``./log/<model>``, ``checkpoint_dir``).

    RecBole's ``ensure_dir`` races: two runs started together in one folder (a sweep, parallel
    ``run_recbole.py``) both see ``./log`` missing and the second dies with ``FileExistsError``.
    ``exist_ok`` makes creation idempotent, and afterwards RecBole only ever finds them present.
    """
    for path in (os.path.join(RECBOLE_LOG_ROOT, config["model"]), config["checkpoint_dir"]):
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as error:
            from recbole_fbsm.errors import ColdStartError

            raise ColdStartError(f"cannot create the folder {path} ({error.strerror}); expected a writable "
                                 "checkpoint_dir and working directory.") from None


def tag_run(config):
    """Give the run an id (``run_id``, unless set) that goes into its log's name.

    RecBole names the log file after the model, dataset, the second it started and an md5 of the
    config's values: two runs of one configuration started in the same second would share (and
    interleave) one log. The id is one of those values, so each run gets its own file.
    """
    if not config["run_id"]:
        config["run_id"] = uuid.uuid4().hex[:8]


def start_run_log(config):
    """RecBole's ``init_logger``, so that this run's lines go to this run's file.

    ``init_logger`` ends in ``logging.basicConfig``, a no-op once the root logger has handlers: in one
    process every later run would write into the first run's file, at the first run's level, and leave
    its own file empty. The handlers this function installed for the previous run are removed and
    closed first. Handlers of a host application are left alone (there ``basicConfig`` stays a no-op,
    as in RecBole).
    """
    make_run_dirs(config)
    tag_run(config)
    root = logging.getLogger()
    while _handlers_of_last_run:
        handler = _handlers_of_last_run.pop()
        root.removeHandler(handler)
        handler.close()
    before = list(root.handlers)
    init_logger(config)
    _handlers_of_last_run.extend(handler for handler in root.handlers if handler not in before)
    keep_epochs_in_the_file()


def keep_epochs_in_the_file():
    """The run's log file records at least INFO (the epochs, the kept epoch, the results) whatever
    ``state`` says; ``state`` still sets what reaches the console (``compare`` runs at WARNING and its
    per-run logs were empty)."""
    files = [h for h in _handlers_of_last_run if isinstance(h, logging.FileHandler)]
    for handler in files:
        handler.setLevel(min(handler.level, logging.INFO))
    root = logging.getLogger()
    if files and root.level > logging.INFO:
        root.setLevel(logging.INFO)


def last_run_log_file():
    """The log file of the last run started in this process (None when a host application owns logging)."""
    files = [h.baseFilename for h in _handlers_of_last_run if isinstance(h, logging.FileHandler)]
    return files[0] if files else None


def run_log_files(config):
    """This run's log file(s): RecBole names the file MODEL-DATASET-time-md5.log, the md5 of the config's
    values, which include this run's ``run_id``: no other run's file has it."""
    values = "".join(str(value) for value in config.final_config_dict.values())
    md5 = hashlib.md5(values.encode("utf-8")).hexdigest()[:6]
    folder = os.path.join(RECBOLE_LOG_ROOT, config["model"])
    return glob.glob(os.path.join(glob.escape(folder), f"{glob.escape(config['model'])}-{glob.escape(str(config['dataset']))}-*-{md5}.log"))


@contextmanager
def discard_run_log_on(config, *errors):
    """Remove this run's log file (and the log folders if left empty) when one of ``errors`` escapes: a
    bad dataset or setting found after the log started leaves nothing behind."""
    try:
        yield
    except errors:
        root = logging.getLogger()
        for handler in list(_handlers_of_last_run):
            if isinstance(handler, logging.FileHandler):
                root.removeHandler(handler)
                handler.close()
                _handlers_of_last_run.remove(handler)
        for path in run_log_files(config):
            os.remove(path)
        for folder in (os.path.join(RECBOLE_LOG_ROOT, config["model"]), RECBOLE_LOG_ROOT):
            try:
                os.rmdir(folder)
            except OSError:  # not empty: other runs' logs
                pass
        raise
