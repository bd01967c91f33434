"""Log damping: no repeating event, and no client, can turn the log into a weapon.

Every log line passes :class:`Damper` (a structlog processor, installed by
``exporter.logging.configure``), so call sites need no change. A line is keyed by its event
name and its *subject* (the first of ``client``, ``target``, ``gpu``, ``url``, ``pod``,
``source`` it carries). Two token buckets decide whether it is written:

- per subject: :data:`SUBJECT_BURST` lines, then one per :data:`SUBJECT_PERIOD` seconds
  (an XID storm on one GPU, one flapping target, one client sending garbage);
- per event, all subjects together: :data:`EVENT_BURST` lines, then one per
  :data:`EVENT_PERIOD` seconds (the same event from many clients or GPUs).

A line that is dropped is counted (``goodput_exporter_log_lines_suppressed_total{event}``),
and the next line written for its subject carries ``suppressed=N``: how many were left out
since the last one. Budgets (docs/security.md "Log floods"): one subject writes at most
``SUBJECT_BURST + 60 / SUBJECT_PERIOD`` lines in any minute, one event at most
``EVENT_BURST + 60 / EVENT_PERIOD``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

from exporter import logsummary

SUBJECT_FIELDS = ("client", "target", "gpu", "url", "pod", "source")
SUBJECT_BURST = 5
SUBJECT_PERIOD = 10.0
"""Seconds per line once a subject's burst is spent: 6 lines a minute."""
EVENT_BURST = 100
"""Generous, so a start-up that lists every one of 64 targets is never cut."""
EVENT_PERIOD = 2.0
"""Seconds per line once an event's burst is spent: 30 lines a minute."""
MAX_KEYS = 4096
"""Subjects remembered (least recently seen forgotten first): bounded memory under a
flood of distinct clients."""

clock: Callable[[], float] = time.monotonic
"""The damper's clock (tests replace it to drive a minute in a second)."""


class _Bucket:
    __slots__ = ("at", "suppressed", "tokens")

    def __init__(self, burst: int, now: float) -> None:
        self.tokens = float(burst)
        self.at = now
        self.suppressed = 0

    def take(self, burst: int, period: float, now: float) -> bool:
        self.tokens = min(float(burst), self.tokens + (now - self.at) / period)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class Damper:
    """The structlog processor; one per process (:data:`DAMPER`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subjects: OrderedDict[tuple[str, str], _Bucket] = OrderedDict()
        self._events: dict[str, _Bucket] = {}
        self.suppressed: Counter[str] = Counter()
        """Lines left out since start, by event (a counter)."""

    def reset(self) -> None:
        with self._lock:
            self._subjects.clear()
            self._events.clear()
            self.suppressed.clear()

    def allow(self, event: str, subject: str) -> int | None:
        """None when the line must be dropped, else how many lines of its subject were
        dropped since the last one written."""
        now = clock()
        with self._lock:
            key = (event, subject)
            bucket = self._subjects.get(key)
            if bucket is None:
                bucket = self._subjects[key] = _Bucket(SUBJECT_BURST, now)
                while len(self._subjects) > MAX_KEYS:
                    self._subjects.popitem(last=False)
            else:
                self._subjects.move_to_end(key)
            per_event = self._events.get(event)
            if per_event is None:
                per_event = self._events[event] = _Bucket(EVENT_BURST, now)
            if not bucket.take(SUBJECT_BURST, SUBJECT_PERIOD, now) or not per_event.take(
                EVENT_BURST, EVENT_PERIOD, now
            ):
                bucket.suppressed += 1
                self.suppressed[event] += 1
                return None
            dropped, bucket.suppressed = bucket.suppressed, 0
            return dropped

    def take_suppressed(self, key: tuple[str, str]) -> int:
        """How many lines of ``key`` (event, subject) were dropped since the last one
        written, now reported by a summary (so no later line reports them again)."""
        with self._lock:
            bucket = self._subjects.get(key)
            if bucket is None:
                return 0
            dropped, bucket.suppressed = bucket.suppressed, 0
            return dropped

    def __call__(
        self, _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        event = str(event_dict.get("event", ""))
        subject = next(
            (str(event_dict[f]) for f in SUBJECT_FIELDS if f in event_dict), ""
        )
        if event_dict.pop(logsummary.SUMMARY, False):
            return event_dict  # one per subject per SUBJECT_PERIOD (logsummary.py)
        dropped = self.allow(event, subject[:256])
        if dropped is None:
            if event in logsummary.MUST_SEE:
                logsummary.SUMMARIES.dropped(
                    (event, subject[:256]), event_dict, SUBJECT_PERIOD, self.take_suppressed
                )
            raise structlog.DropEvent
        if dropped:
            event_dict["suppressed"] = dropped
        return event_dict


DAMPER = Damper()
