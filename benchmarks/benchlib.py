"""Helpers shared by ``bench_lightfm.py`` and ``bench_scale.py`` (memory, formatting, fits, data).

Importing this module imports neither torch nor RecBole: the LightFM worker of ``bench_lightfm.py``
uses it and its peak memory must not include them.
"""

import hashlib
import json
import math
import os
import resource
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULT_TAG = "BENCH_RESULT "

# plugin settings every benchmark run uses: quiet, no caches, logs and checkpoints in the working dir
QUIET_CONFIG = {"state": "ERROR", "show_progress": False, "save_dataset": False, "save_dataloaders": False}


# ----------------------------------------------------------------------------------------- memory
def current_rss_mib(pid="self"):
    """Resident set size now (Linux /proc; falls back to this process's peak elsewhere)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mib() if pid == "self" else None


def peak_rss_mib():
    """Peak resident set size of this process: VmHWM on Linux, else ru_maxrss (KiB on Linux, bytes on macOS).

    Not ru_maxrss on Linux: a process started by fork/vfork + exec inherits its parent's peak there as a
    floor (the kernel keeps the pre-exec memory's high-water mark), so a worker spawned by a driver that
    generated data in-process would report at least the driver's peak.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def reset_peak():
    """Reset this process's peak RSS to its current RSS (Linux >= 4.0: ``/proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


class PhasePeaks:
    """Peak RSS per phase (setup, train, eval, ...): the peak is read at the end of a phase, then reset,
    so the next phase's peak is its own. Where the reset is not possible the peaks are cumulative (the
    whole-process peak, ``max``, stays right)."""

    def __init__(self):
        self.baseline = current_rss_mib()
        self.peaks, self.after = {}, {}
        self.resettable = True

    def end(self, phase):
        self.peaks[phase] = max(self.peaks.get(phase, 0.0), peak_rss_mib())
        self.after[phase] = current_rss_mib()
        self.resettable = reset_peak() and self.resettable

    def report(self):
        return {
            "baseline_rss_mib": self.baseline,
            "peak_rss_mib": max(self.peaks.values(), default=None),
            "phase_peak_rss_mib": dict(self.peaks),
            "rss_after_phase_mib": dict(self.after),
            "phase_peaks_reset": self.resettable,
        }


def thread_env(threads, base=None):
    """Environment for a worker: BLAS / OpenMP pools capped at ``threads`` (0: leave as is), the repository
    importable."""
    env = dict(os.environ if base is None else base)
    if threads:
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[name] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def emit(report):
    """One result line on stdout (the driver ignores every other line)."""
    print(RESULT_TAG + json.dumps(report), flush=True)


def parse_result(line):
    return json.loads(line[len(RESULT_TAG) :]) if line.startswith(RESULT_TAG) else None


# ------------------------------------------------------------------------------------- formatting
def fmt(value, digits=3):
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def spread(values):
    """``median (min-max)`` of a list of timings."""
    if not values:
        return "-"
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(statistics.median(values))} ({fmt(min(values), 2)}-{fmt(max(values), 2)})"


def markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def parse_config(pairs):
    """``key=value`` settings; values are read as JSON when they parse (numbers, lists), else strings."""
    config = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        try:
            config[key] = json.loads(value)
        except json.JSONDecodeError:
            config[key] = value
    return config


def loglog_slope(xs, ys):
    """Least-squares fit log y = a + b log x over the positive pairs: (b, a, n points); b None below 2."""
    pairs = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x and y and x > 0 and y > 0]
    if len(pairs) < 2 or len({p[0] for p in pairs}) < 2:
        return None, None, len(pairs)
    mean_x = statistics.fmean(p[0] for p in pairs)
    mean_y = statistics.fmean(p[1] for p in pairs)
    sxx = sum((p[0] - mean_x) ** 2 for p in pairs)
    b = sum((p[0] - mean_x) * (p[1] - mean_y) for p in pairs) / sxx
    return b, mean_y - b * mean_x, len(pairs)


def fingerprint(*arrays):
    """Short hash of integer arrays (to check that two processes saw the same split)."""
    import numpy as np

    digest = hashlib.sha1()
    for array in arrays:
        array = np.ascontiguousarray(np.asarray(array, dtype=np.int64))
        digest.update(str(array.shape).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:12]


# ------------------------------------------------------------------------------------ nnz helpers
def nnz_of(matrix):
    """Number of stored entries of a TorchCsr-like object, a torch sparse tensor or a scipy matrix."""
    if matrix is None:
        return None
    values = getattr(matrix, "values", None)
    if values is not None and not callable(values) and hasattr(values, "numel"):
        return int(values.numel())
    if hasattr(matrix, "nnz"):
        return int(matrix.nnz)
    if hasattr(matrix, "_nnz"):
        return int(matrix._nnz())
    if callable(values):
        return int(values().numel())
    return None


def feature_sizes(model, train_dataset, config):
    """(n_features, nnz(F), nnz(F_U)) of the model, read from ``model.F`` / ``model.F_U`` when the model
    has them, else rebuilt with the plugin's public functions (call it after reading the peak RSS)."""
    F, F_U = getattr(model, "F", None), getattr(model, "F_U", None)
    n_features, nnz_f, nnz_fu = getattr(model, "n_features", None), nnz_of(F), nnz_of(F_U)
    if nnz_f is None or nnz_fu is None:
        from recbole_fbsm.data.features import features_from_config, like_matrix

        matrix = features_from_config(train_dataset, train_dataset.split_items, config, normalize=True).matrix
        n_features = matrix.shape[1]
        nnz_f = int(matrix.nnz) if nnz_f is None else nnz_f
        if nnz_fu is None:
            nnz_fu = int((like_matrix(train_dataset) @ matrix).nnz)
    return n_features, nnz_f, nnz_fu


# --------------------------------------------------------------------------------- generated data
def generated_name(users, items, features, words_per_item, interactions):
    return f"gen_u{users}_i{items}_f{features}_w{words_per_item}_n{interactions}"


def ensure_generated(data_path, users, items, features, words_per_item, interactions, seed, quiet=False):
    """Write ``scale_dataset`` data into ``data_path`` unless already there; returns the dataset name."""
    name = generated_name(users, items, features, words_per_item, interactions)
    if not (Path(data_path) / name / f"{name}.inter").is_file():
        from scale_data import scale_dataset

        start = time.perf_counter()
        scale_dataset(data_path, name, users, items, features, words_per_item, interactions, seed=seed)
        if not quiet:
            print(f"generated {name} in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return name


# ------------------------------------------------------------------------------------------ timing
def device_sync(torch, device):
    """A function that waits for the device's queued work (CUDA), so that wall times include it; a no-op on the
    CPU. ``torch`` is passed in: this module does not import it."""
    if torch.device(device).type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def count_loss_rows(model):
    """Wrap ``model.calculate_loss`` to count the rows (triplets) the trainer feeds it; returns the counter, a
    one-element list that the caller may reset."""
    counter, calculate_loss = [0], model.calculate_loss

    def counting_loss(interaction):
        counter[0] += len(interaction)
        return calculate_loss(interaction)

    model.calculate_loss = counting_loss
    return counter
