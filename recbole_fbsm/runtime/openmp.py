"""OpenMP's wait policy, chosen before torch loads its OpenMP runtime (standard library and PyYAML only).

Spinning waits (libgomp's default) on busy cores made FBSM's ml-100k epochs 34-42 s instead of 1.1 s
(docs/performance.md, "Threads"). The runtime reads ``OMP_WAIT_POLICY`` once, at ``import torch``, so the
command line calls ``prefer_passive_wait_for(argv)`` before it imports anything that imports torch. A host
application that imports the package is left alone: ``torch_threads: auto`` then keeps every phase at one thread.
"""

import os
import sys

import yaml

# any of these set by the user is their choice of how OpenMP waits (libgomp, LLVM's and Intel's runtimes)
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
# whether this process's command line chose the wait policy (``prefer_passive_wait``): only there is advice on
# OpenMP's variables the user's business on the console; a host application importing the package gets none
_CHOSEN = {"by_command_line": False}


def chosen_by_command_line():
    """True once the command line (not a host application) has set or respected the wait policy."""
    return _CHOSEN["by_command_line"]


def is_auto(torch_threads):
    """``torch_threads`` asks for the default thread policy: unset, ``~`` or ``auto``."""
    return torch_threads is None or (
        isinstance(torch_threads, str) and torch_threads.strip().lower() in ("auto", "~", "none")
    )


def waits_passively(environ=None):
    """Whether this process's OpenMP threads sleep while they wait (read from the variables the runtime read)."""
    environ = os.environ if environ is None else environ
    return (
        environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"
        or environ.get("GOMP_SPINCOUNT", "").strip() == "0"
    )


def prefer_passive_wait(torch_threads=None, environ=None, modules=None):
    """Set ``OMP_WAIT_POLICY=PASSIVE`` for this process (and the processes it starts) when the thread
    policy is ``auto``, the user set no wait variable and torch is not loaded yet. An explicit
    ``torch_threads: N`` keeps OpenMP's own (spinning) waits, as before. True when it was set."""
    if environ is None:
        _CHOSEN["by_command_line"] = True
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if not is_auto(torch_threads) or "torch" in modules or any(name in environ for name in WAIT_VARIABLES):
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def torch_threads_asked(argv):
    """The user's ``torch_threads`` from a command line: ``--torch_threads=V``, else the last of the
    ``--config_files`` that sets it; None when neither does. Unreadable files are skipped here: the
    settings check names them later."""
    given, files = None, []
    argv = list(argv)
    for position, item in enumerate(argv):
        if item.startswith("--torch_threads="):
            given = item.partition("=")[2]
        elif item.startswith("--config_files="):
            files = item.partition("=")[2].split()
        elif item == "--config_files" and position + 1 < len(argv):
            files = argv[position + 1].split()
    if given is not None:
        return given
    for path in reversed(files):
        try:
            with open(path, encoding="utf-8") as handle:
                loaded = yaml.safe_load(handle)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(loaded, dict) and "torch_threads" in loaded:
            return loaded["torch_threads"]
    return None


def prefer_passive_wait_for(argv):
    """``prefer_passive_wait`` with the ``torch_threads`` of a command line (the entry points call it first)."""
    return prefer_passive_wait(torch_threads_asked(argv))
