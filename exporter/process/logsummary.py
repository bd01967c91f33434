"""Refusals an operator must always see: a dropped one is summarized, never silent.

The damper (``exporter/process/logdamp.py``) drops lines past their line budget, and its
byte budget drops lines past their bytes (a refusal whose error is long or not ASCII can
be kilobytes of JSON). For most events the next line of their subject says how many were
left out; for a refusal (a refused reload) the next line may never come, and the log
would fall silent on a configuration that is not running. So when such a line is
dropped by either budget, one summary line is written once the subject's line budget
allows one again (at most :data:`~exporter.process.logdamp.SUBJECT_PERIOD` later),
whether or not another refusal follows, and at once when the configuration is next
accepted (:meth:`Summaries.flush`, before ``config_reloaded``): ``N more refusals``,
when the first and last of them were refused, and the last one's error cut to
:data:`SUMMARY_ERROR_CHARS`. A summary passes both budgets (at most one per subject per
period, and at most about 1 KB), so a refusal is never lost to either.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime
from typing import Any

import structlog

MUST_SEE = {"config_reload_failed": "refusals"}
"""Events never damped into silence, and what their summary calls them."""
SUMMARY = "_summary"
"""Marks a summary line: the damper and the byte budget let it through (its rate and
size are bounded here)."""
SUMMARY_ERROR_CHARS = 120
"""Characters of the last refusal's error a summary repeats."""
KEPT = ("error", "effect", "config_file", "web_config_file")
"""Fields of the last refusal a summary carries (each cut)."""

Key = tuple[str, str]
"""(event, subject), as the damper keys its buckets."""


class _Pending:
    __slots__ = ("fields", "first", "last", "take", "timer")

    def __init__(self, fields: dict[str, Any], at: float, take: Callable[[Key], int]) -> None:
        self.fields = fields
        self.first = at
        self.last = at
        self.take = take
        self.timer: threading.Timer | None = None


class Summaries:
    """Pending summaries of dropped must-see lines; one timer per (event, subject)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[Key, _Pending] = {}

    def dropped(
        self, key: Key, event_dict: MutableMapping[str, Any], delay: float,
        take: Callable[[Key], int],
    ) -> None:
        """A must-see line was dropped: its summary is written after ``delay`` seconds
        (or at :meth:`flush`) with the count ``take`` hands over (0 when a later line
        already said it)."""
        fields = {k: _cut(event_dict[k]) for k in KEPT if k in event_dict}
        fields["level"] = str(event_dict.get("level", "error"))
        now = time.time()
        with self._lock:
            pending = self._pending.get(key)
            if pending is None:
                pending = self._pending[key] = _Pending(fields, now, take)
                pending.timer = threading.Timer(max(delay, 0.0), self._write, (key,))
                pending.timer.daemon = True
                pending.timer.start()
            pending.fields, pending.last = fields, now

    def flush(self, event: str) -> None:
        """Write every pending summary of ``event`` now (the configuration was accepted:
        the refusals before it must be in the log before the line that says so)."""
        with self._lock:
            keys = [k for k in self._pending if k[0] == event]
        for key in keys:
            self._write(key)

    def _write(self, key: Key) -> None:
        with self._lock:
            pending = self._pending.pop(key, None)
        if pending is None:
            return
        if pending.timer is not None:
            pending.timer.cancel()
        count = pending.take(key)
        if count <= 0:
            return  # a later line of the subject already said how many
        event = key[0]
        fields = dict(pending.fields)
        level = fields.pop("level")
        log = structlog.get_logger("logdamp")
        emit = getattr(log, level, log.error)
        emit(event, **fields, suppressed=count, summary=f"{count} more {MUST_SEE[event]}",
             first_refused_at=_iso(pending.first), last_refused_at=_iso(pending.last),
             **{SUMMARY: True})


def _cut(value: Any) -> Any:
    if value is None or isinstance(value, (int, float, bool)):
        return value
    text = str(value)
    if len(text) > SUMMARY_ERROR_CHARS:
        return f"{text[:SUMMARY_ERROR_CHARS]}...(+{len(text) - SUMMARY_ERROR_CHARS})"
    return text


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


SUMMARIES = Summaries()
