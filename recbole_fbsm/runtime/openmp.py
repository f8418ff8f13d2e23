"""OpenMP's wait policy, set by the command line before ``import torch`` reads it (standard library and PyYAML only):
spinning waits on busy cores made epochs up to 40 times slower (docs/performance.md, "Threads")."""

import argparse
import os
import sys

import yaml

# any of these set by the user is their choice of how OpenMP waits (libgomp, LLVM's and Intel's runtimes)
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def is_auto(torch_threads):
    """``torch_threads`` asks for the default thread policy: unset, ``~`` or ``auto``."""
    return torch_threads is None or (
        isinstance(torch_threads, str) and torch_threads.strip().lower() in ("auto", "~", "none")
    )


def usable_cores(environ=None):
    """The cores this process may run on (CPU affinity), at most ``OMP_NUM_THREADS`` when ``environ`` sets it."""
    environ = os.environ if environ is None else environ
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if limit.isdigit() and int(limit) >= 1:
        cores = min(cores, int(limit))
    return max(1, cores)


def waits_passively(environ=None):
    """Whether this process's OpenMP threads sleep while they wait (read from the variables the runtime read)."""
    environ = os.environ if environ is None else environ
    return (
        environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"
        or environ.get("GOMP_SPINCOUNT", "").strip() == "0"
    )


def prefer_passive_wait(torch_threads=None, environ=None, modules=None):
    """Set ``OMP_WAIT_POLICY=PASSIVE`` (for this process and its children) under ``torch_threads: auto`` when the
    user set no wait variable and torch is not loaded yet; True when it was set."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if not is_auto(torch_threads) or "torch" in modules or any(name in environ for name in WAIT_VARIABLES):
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def torch_threads_asked(argv):
    """``--torch_threads=V``, else the last of the ``--config_files`` that sets it, else None (an unreadable file is
    skipped: the settings check names it later)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--torch_threads")
    parser.add_argument("--config_files", type=str.split, default=[])
    try:
        asked = parser.parse_known_args(argv)[0]
    except argparse.ArgumentError:  # a malformed command line: the command's own parser names it
        return None
    if asked.torch_threads is not None:
        return asked.torch_threads
    for path in reversed(asked.config_files):
        try:
            with open(path, encoding="utf-8") as handle:
                loaded = yaml.safe_load(handle)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(loaded, dict) and "torch_threads" in loaded:
            return loaded["torch_threads"]
    return None
