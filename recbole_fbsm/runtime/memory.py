"""Freed memory given back between a run's phases: glibc keeps freed blocks under 32 MiB in its heap (400 MB of
parsing temporaries after loading 10^7 likes); ``malloc_trim`` returns them. Elsewhere nothing happens."""

import ctypes
import ctypes.util

try:
    _MALLOC_TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
except (OSError, AttributeError):  # no glibc (macOS, musl, Windows): no malloc_trim
    _MALLOC_TRIM = None


def release_free_memory():
    """Return the heap's free pages to the system (glibc only)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
