"""Refusals an operator must always see: a damped one is summarized, never silent.

The damper (``exporter/runtime/logdamp.py``) drops lines past their budget and tells the next line
of their subject how many were left out. For most events that is enough; for a refusal
(a refused reload) the next line may never come, and the log would fall silent on a
configuration that is not running. So when such a line is dropped, one summary line is
written once the subject's budget allows a line again (``N more refusals``, with the
last refusal's fields), whether or not another refusal follows: at most one summary per
subject per :data:`~exporter.runtime.logdamp.SUBJECT_PERIOD`, so the log budget holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

MUST_SEE = {"config_reload_failed": "refusals"}
"""Events never damped into silence, and what their summary calls them."""
SUMMARY = "_summary"
"""Marks a summary line: the damper writes it (its rate is bounded here)."""
SKIPPED = frozenset({"event", "level", "timestamp", "suppressed", SUMMARY})

Key = tuple[str, str]
"""(event, subject), as the damper keys its buckets."""


class Summaries:
    """Pending summaries of dropped must-see lines; one timer per (event, subject)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[Key, dict[str, Any]] = {}

    def dropped(
        self, key: Key, event_dict: MutableMapping[str, Any], delay: float,
        take: Callable[[Key], int],
    ) -> None:
        """A must-see line was dropped: its summary is written after ``delay`` seconds
        with the count ``take`` hands over (0 when a later line already said it)."""
        fields = {k: v for k, v in event_dict.items() if k not in SKIPPED}
        fields["level"] = str(event_dict.get("level", "error"))
        with self._lock:
            armed = key in self._pending
            self._pending[key] = fields
        if not armed:
            timer = threading.Timer(max(delay, 0.0), self._write, (key, take))
            timer.daemon = True
            timer.start()

    def _write(self, key: Key, take: Callable[[Key], int]) -> None:
        with self._lock:
            fields = self._pending.pop(key, None)
        count = take(key)
        if fields is None or count <= 0:
            return  # a later line of the subject already said how many
        event = key[0]
        level = fields.pop("level")
        log = structlog.get_logger("logdamp")
        emit = getattr(log, level, log.error)
        emit(event, **fields, suppressed=count, summary=f"{count} more {MUST_SEE[event]}",
             **{SUMMARY: True})


SUMMARIES = Summaries()
