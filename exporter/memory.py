"""Keep glibc from giving every thread its own malloc arena.

The daemon runs a few threads (one per blocking source, the exposition encoder, the
executor serving cache misses). glibc gives each thread that allocates its own arena, up to
8 per core, and each arena keeps the pages it touched: on a 16-core GPU node that was a
large part of the resident set. Two arenas are plenty for a process that mostly waits;
``MALLOC_ARENA_MAX`` in the environment still wins.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_ARENA_MAX = -8
"""mallopt() parameter number of M_ARENA_MAX in glibc's malloc.h."""


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas; True if applied (False on musl, macOS, or when the
    environment already sets MALLOC_ARENA_MAX). Call before starting threads."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
