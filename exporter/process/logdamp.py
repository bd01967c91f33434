"""Log damping: no repeating event, and no client, can turn the log into a weapon.

Every log line passes :class:`Damper` (a structlog processor, installed by
``exporter.process.logging.configure``), so call sites need no change. A line is keyed by its event
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

Lines are not all alike: one line may name a thousand jobs. So :class:`ByteBudget`, the
next processor, bounds bytes too. It cuts every line first (a string field at
:data:`MAX_FIELD_CHARS` characters, a list at :data:`MAX_LIST_ITEMS` items with
``<field>_omitted=N``), then spends its JSON size from two more buckets, in bytes: per
subject :data:`SUBJECT_BYTES` a minute, per event :data:`EVENT_BYTES` a minute (half of
each as the burst). A line over either is dropped and counted like any other.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

from exporter.process import logsummary

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

MAX_FIELD_CHARS = 512
"""Characters of one string field written; the rest is replaced by a count."""
MAX_LIST_ITEMS = 16
"""Items of one list field written; ``<field>_omitted`` says how many more there were."""
SUBJECT_BYTES = 8 * 1024
"""Bytes of log one subject may write in any minute (docs/security.md "Log floods")."""
EVENT_BYTES = 64 * 1024
"""Bytes of log one event may write in any minute, all subjects together."""
LINE_OVERHEAD = 48
"""Bytes a line gets after this processor: its timestamp field and the newline."""

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
        self.bytes = ByteBudget(self.suppressed)
        """The byte budget (the processor after this one), reset with it."""

    def reset(self) -> None:
        with self._lock:
            self._subjects.clear()
            self._events.clear()
            self.suppressed.clear()
        self.bytes.reset()

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

    def take_all(self, key: tuple[str, str]) -> int:
        """Lines of ``key`` either budget dropped since the last one written."""
        return self.take_suppressed(key) + self.bytes.take_suppressed(key)

    def __call__(
        self, _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        event = str(event_dict.get("event", ""))
        subject = next(
            (str(event_dict[f]) for f in SUBJECT_FIELDS if f in event_dict), ""
        )
        if event_dict.get(logsummary.SUMMARY):
            return event_dict  # one per subject per SUBJECT_PERIOD (logsummary.py)
        dropped = self.allow(event, subject[:256])
        if dropped is None:
            if event in logsummary.MUST_SEE:
                logsummary.SUMMARIES.dropped(
                    (event, subject[:256]), event_dict, SUBJECT_PERIOD, self.take_all
                )
            raise structlog.DropEvent
        if dropped:
            event_dict["suppressed"] = dropped
        return event_dict


def subject_of(event_dict: MutableMapping[str, Any]) -> str:
    """The line's subject: the first of :data:`SUBJECT_FIELDS` it carries, cut."""
    return next((str(event_dict[f]) for f in SUBJECT_FIELDS if f in event_dict), "")[:256]


def shorten(event_dict: MutableMapping[str, Any]) -> None:
    """Cut every long string field to :data:`MAX_FIELD_CHARS` characters and every long
    list to :data:`MAX_LIST_ITEMS` items (``<field>_omitted`` counts the rest), in place."""
    for key, value in list(event_dict.items()):
        if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
            event_dict[key] = f"{value[:MAX_FIELD_CHARS]}...(+{len(value) - MAX_FIELD_CHARS})"
        elif isinstance(value, (list, tuple, set, frozenset)) and len(value) > MAX_LIST_ITEMS:
            items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
            event_dict[key] = [
                shortened(v) for v in list(items)[:MAX_LIST_ITEMS]
            ]
            event_dict[f"{key}_omitted"] = len(value) - MAX_LIST_ITEMS
        elif isinstance(value, (list, tuple)):
            event_dict[key] = [shortened(v) for v in value]


def shortened(value: Any) -> Any:
    """One list item, a long string cut like a field."""
    if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
        return value[:MAX_FIELD_CHARS] + "..."
    return value


class ByteBudget:
    """The structlog processor after :class:`Damper`: bounds each line's size and each
    subject's and event's bytes per minute (token buckets counting bytes)."""

    def __init__(self, suppressed: Counter[str]) -> None:
        self._lock = threading.Lock()
        self._subjects: OrderedDict[tuple[str, str], _Bucket] = OrderedDict()
        self._events: dict[str, _Bucket] = {}
        self.suppressed = suppressed
        """Shared with the line damper: one counter of lines left out, by event."""

    def reset(self) -> None:
        with self._lock:
            self._subjects.clear()
            self._events.clear()

    def allow(self, event: str, subject: str, size: int) -> int | None:
        """None when ``size`` bytes would overdraw the subject's or the event's budget,
        else how many of the subject's lines this budget dropped since the last one."""
        now = clock()
        with self._lock:
            key = (event, subject)
            bucket = self._subjects.get(key)
            if bucket is None:
                bucket = self._subjects[key] = _Bucket(SUBJECT_BYTES // 2, now)
                while len(self._subjects) > MAX_KEYS:
                    self._subjects.popitem(last=False)
            else:
                self._subjects.move_to_end(key)
            per_event = self._events.setdefault(event, _Bucket(EVENT_BYTES // 2, now))
            if not _spend(bucket, SUBJECT_BYTES, size, now) or not _spend(
                per_event, EVENT_BYTES, size, now
            ):
                bucket.suppressed += 1
                self.suppressed[event] += 1
                return None
            dropped, bucket.suppressed = bucket.suppressed, 0
            return dropped

    def take_suppressed(self, key: tuple[str, str]) -> int:
        """Lines of ``key`` (event, subject) this budget dropped since the last one
        written, now reported by a summary."""
        with self._lock:
            bucket = self._subjects.get(key)
            if bucket is None:
                return 0
            dropped, bucket.suppressed = bucket.suppressed, 0
            return dropped

    def __call__(
        self, _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        shorten(event_dict)
        if event_dict.pop(logsummary.SUMMARY, False):
            return event_dict  # bounded in rate and size by logsummary.py
        try:
            size = len(json.dumps(event_dict, default=str)) + LINE_OVERHEAD
        except (TypeError, ValueError):  # a field JSON cannot hold: its text's size instead
            size = len(str(event_dict)) + LINE_OVERHEAD
        event, subject = str(event_dict.get("event", "")), subject_of(event_dict)
        dropped = self.allow(event, subject, size)
        if dropped is None:
            if event in logsummary.MUST_SEE:  # never silent: summarized (logsummary.py)
                carried = int(event_dict.get("suppressed", 0))
                with self._lock:  # the lines this one would have reported are owed too
                    bucket = self._subjects.get((event, subject))
                    if bucket is not None:
                        bucket.suppressed += carried
                logsummary.SUMMARIES.dropped(
                    (event, subject), event_dict, SUBJECT_PERIOD, DAMPER.take_all
                )
            raise structlog.DropEvent
        if dropped:
            event_dict["suppressed"] = int(event_dict.get("suppressed", 0)) + dropped
        return event_dict


def _spend(bucket: _Bucket, per_minute: int, size: int, now: float) -> bool:
    """Take ``size`` bytes from a bucket of ``per_minute // 2`` bytes refilled at
    ``per_minute / 2`` a minute: never more than ``per_minute`` in any minute."""
    burst = per_minute // 2
    bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.at) * burst / 60.0)
    bucket.at = now
    if bucket.tokens >= size:
        bucket.tokens -= size
        return True
    return False


DAMPER = Damper()
BYTES = DAMPER.bytes
