"""Reads given up but still stuck in the kernel, per source: what
``goodput_exporter_source_reads_stuck`` publishes.

A source whose reads can block (a process in D state, a hung file system) abandons them on
threads that stay inside the read until the kernel lets go; each holds a thread and a file
descriptor. The source registers how to count them here, and the self-metrics read them at
scrape time, so the count is visible without the source publishing a poll.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_COUNTERS: dict[str, Callable[[], int]] = {}
_LOCK = threading.Lock()


def register(source: str, count: Callable[[], int]) -> None:
    """``count()`` says how many of ``source``'s reads are stuck now (a source created
    again on reload replaces its entry)."""
    with _LOCK:
        _COUNTERS[source] = count


def counts() -> dict[str, int]:
    """source -> reads stuck now."""
    with _LOCK:
        counters = dict(_COUNTERS)
    return {source: count() for source, count in sorted(counters.items())}
