"""Per-GPU choice of the profiling source in ``--profiling=auto``.

Nodes can mix GPU generations, so the choice is made per GPU, in a fixed order of preference
(GPM, then DCGM, then dcgm-exporter). Each source reports, per GPU, whether it can serve it;
a source polls a GPU only once every source before it has said it cannot, and publishes for
it only while no later source is serving it instead. That way each GPU has exactly one
``goodput_gpu_profiling_available`` row at 1, or the 0 rows of the sources that tried.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import structlog

log = structlog.get_logger("profiling")


class ProfilingSelector:
    """Shared by the profiling sources of one process; thread-safe (sources run on threads)."""

    def __init__(self, candidates: Sequence[str]) -> None:
        self.candidates = tuple(candidates)
        self._lock = threading.Lock()
        self._status: dict[tuple[str, str], tuple[bool, str]] = {}
        self._owner: dict[str, str] = {}

    def report(self, source: str, gpu: str, ok: bool, reason: str = "") -> None:
        """``source`` can (``ok``) or cannot (with ``reason``) read profiling on ``gpu``."""
        with self._lock:
            self._status[(source, gpu)] = (ok, reason)
            owner = next(
                (c for c in self.candidates if self._status.get((c, gpu), (False, ""))[0]), ""
            )
            decided = owner or self._all_declined(gpu)
            if decided and self._owner.get(gpu) != owner:
                self._owner[gpu] = owner
                log.debug(  # per-GPU detail: the start-up line counts the sources
                    "profiling_source_selected",
                    gpu=gpu,
                    source=owner or "none",
                    tried={
                        c: self._status.get((c, gpu), (False, "pending"))[1] or "ok"
                        for c in self.candidates
                    },
                )

    def _all_declined(self, gpu: str) -> bool:
        return all((c, gpu) in self._status for c in self.candidates)

    def should_poll(self, source: str, gpu: str) -> bool:
        """True when every source preferred to ``source`` has declined ``gpu``."""
        with self._lock:
            for candidate in self.candidates:
                if candidate == source:
                    return True
                ok, _ = self._status.get((candidate, gpu), (True, "pending"))
                if ok:
                    return False  # a preferred source serves it, or has not answered yet
            return False  # not a candidate

    def should_publish(self, source: str, gpu: str) -> bool:
        """False while a later source serves ``gpu`` in place of a failing ``source``."""
        with self._lock:
            later = self.candidates[self.candidates.index(source) + 1 :]
            own_ok = self._status.get((source, gpu), (False, ""))[0]
            return own_ok or not any(self._status.get((c, gpu), (False, ""))[0] for c in later)

    def owner(self, gpu: str) -> str:
        """The source serving ``gpu``; "" while undecided or when none can."""
        with self._lock:
            return self._owner.get(gpu, "")
