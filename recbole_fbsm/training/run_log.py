"""Each run its own RecBole log (folders made without a race, a run id in its name, the previous run's handlers
closed), and a quiet console unless ``state`` is set: what a user needs on the console, everything RecBole
writes and the libraries' warnings in the log file."""

import glob
import hashlib
import logging
import os
import uuid
from contextlib import contextmanager

from recbole.utils import init_logger

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.recbole_compat import COLOR_CODES, EVALUATING_LINE, RECBOLE_LOG_ROOT, TRAINING_LINE
from recbole_fbsm.storage.run_records import result_file_for  # noqa: F401 (the run's record file, beside its log)

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # recbole_fbsm/

_handlers_of_last_run = []


def on_console(shown=True):
    """``extra=`` for a log call whose line must (True) or must not (False) reach the quiet console."""
    return {"console": bool(shown)}


def start_run_log(config):
    """RecBole's ``init_logger``, so that this run's lines go to this run's file: it ends in ``basicConfig``, a no-op
    once the root logger has handlers, so the previous run's handlers (installed here) are closed first; a host
    application's handlers are left alone."""
    # RecBole's check-then-makedirs races: the second of two runs started together in one folder died
    for path in (os.path.join(RECBOLE_LOG_ROOT, config["model"]), config["checkpoint_dir"]):
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as error:
            raise ColdStartError(
                f"cannot create the folder {path} ({error.strerror}); expected a writable "
                "checkpoint_dir and working directory."
            ) from None
    # RecBole names the log after the model, dataset, second and an md5 of the config's values: a run id among
    # them keeps two runs of one configuration in the same second apart
    config["run_id"] = config["run_id"] or uuid.uuid4().hex[:8]
    root = logging.getLogger()
    while _handlers_of_last_run:
        handler = _handlers_of_last_run.pop()
        root.removeHandler(handler)
        handler.close()
    before = list(root.handlers)
    init_logger(config)
    added = [handler for handler in root.handlers if handler not in before]
    quiet = "state" not in (getattr(config, "external_config_dict", None) or {})  # any state: RecBole's console
    for index, handler in enumerate(added):
        if isinstance(handler, logging.FileHandler):  # at least INFO whatever ``state`` says (``compare``'s WARNING)
            handler.setLevel(min(handler.level, logging.INFO))
            root.setLevel(min(root.level, logging.INFO))
        elif quiet and isinstance(handler, logging.StreamHandler):  # RecBole's console: a quiet one instead
            added[index] = QuietConsoleHandler(handler.stream, str(config["valid_metric"] or "valid_score").lower())
            added[index].setLevel(handler.level)
            added[index].setFormatter(handler.formatter)
            root.removeHandler(handler)
            root.addHandler(added[index])
    logging.captureWarnings(quiet and bool(added))  # library warnings: into the log file, not the console
    _handlers_of_last_run.extend(added)


def end_run_log():
    """Stop routing Python warnings into the run's log (they go to stderr again after a run)."""
    logging.captureWarnings(False)
    for handler in _handlers_of_last_run:
        handler.flush()


class QuietConsoleHandler(logging.StreamHandler):
    """The console of a run without ``state``: lines marked ``extra=on_console()``, the plugin's own INFO lines unless
    marked ``on_console(False)``, WARNING and above (not Python warnings), and RecBole's training and evaluation
    lines of an epoch, shortened (``epoch 3: train loss: 0.4123 (0.29s)``, ``epoch 3: valid recall@10: 0.1840
    (0.31s)``). The rest is in the log file."""

    def __init__(self, stream, valid_metric):
        super().__init__(stream)
        self.valid_metric = valid_metric

    def emit(self, record):
        text = COLOR_CODES.sub("", str(record.getMessage())).strip()
        epoch_line = TRAINING_LINE.match(text) or EVALUATING_LINE.match(text)
        shown = getattr(record, "console", None)
        if shown is None:
            shown = record.name != "py.warnings" and (
                record.levelno >= logging.WARNING or str(record.pathname).startswith(PACKAGE_DIR)
            )
        if epoch_line:
            epoch, seconds, what = epoch_line.groups()
            what = f"valid {self.valid_metric}: {what}" if epoch_line.re is EVALUATING_LINE else what
            line = f"epoch {epoch}: {what} ({seconds}s)"
            record = logging.makeLogRecord({**record.__dict__, "msg": line, "args": ()})
        elif not shown:
            return
        super().emit(record)


def last_run_log_file():
    """The log file of the last run started in this process (None when a host application owns logging)."""
    files = [h.baseFilename for h in _handlers_of_last_run if isinstance(h, logging.FileHandler)]
    return files[0] if files else None


def run_log_files(config):
    """This run's log file(s): MODEL-DATASET-time-md5.log, the md5 of the config's values (``run_id`` among them)."""
    values = "".join(str(value) for value in config.final_config_dict.values())
    md5 = hashlib.md5(values.encode("utf-8")).hexdigest()[:6]
    folder = os.path.join(RECBOLE_LOG_ROOT, config["model"])
    return glob.glob(
        os.path.join(
            glob.escape(folder), f"{glob.escape(config['model'])}-{glob.escape(str(config['dataset']))}-*-{md5}.log"
        )
    )


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
        for path in run_log_files(config):  # RecBole makes the file even where a host's handlers keep it unused
            os.remove(path)
        for folder in (os.path.join(RECBOLE_LOG_ROOT, config["model"]), RECBOLE_LOG_ROOT):
            try:
                os.rmdir(folder)
            except OSError:  # not empty: other runs' logs
                pass
        raise
