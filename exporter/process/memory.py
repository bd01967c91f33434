"""Tune glibc's malloc for a daemon that mostly waits and sometimes reads a big body.

Two glibc defaults cost resident memory that is never given back:

- **Arenas.** glibc gives each thread that allocates its own arena, up to 8 per core, and
  each arena keeps the pages it touched. The daemon runs a few threads (one per blocking
  source, the exposition encoder, the executor); on a 16-core GPU node that was a large
  part of the resident set. Two arenas are plenty.
- **The dynamic mmap threshold.** Blocks of 128 KiB and more are mapped on their own and
  unmapped when freed, but freeing one raises the threshold to its size (up to 32 MiB).
  After one 5 MB serving body had been read and parsed, every later buffer below 5 MB came
  from the heap and stayed resident: the soak's RSS stepped up 43 MB on the first such body
  (docs/benchmarks.md). Setting the threshold pins it at glibc's own default, so big
  buffers go back to the kernel as soon as they are freed.

``MALLOC_ARENA_MAX`` / ``MALLOC_MMAP_THRESHOLD_`` in the environment still win. No-ops on
musl and macOS.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable

M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
"""mallopt() parameter numbers in glibc's malloc.h."""

MMAP_THRESHOLD_BYTES = 128 * 1024
"""glibc's initial threshold; setting it explicitly switches the dynamic raise off."""


def _mallopt() -> Callable[[int, int], int] | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def tune_malloc(arenas: int = 2) -> dict[str, bool]:
    """Cap the arenas and pin the mmap threshold; says which setting was applied. Call
    before starting threads."""
    mallopt = _mallopt()
    applied = {"arena_max": False, "mmap_threshold": False}
    if mallopt is None:
        return applied
    if "MALLOC_ARENA_MAX" not in os.environ:
        applied["arena_max"] = bool(mallopt(M_ARENA_MAX, arenas))
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        applied["mmap_threshold"] = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    return applied
