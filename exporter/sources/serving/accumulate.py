"""Counters that never go backwards across engine restarts and attribution changes.

Each engine counter is turned into a delta per scrape (a drop means the engine restarted:
the new value is all new work), and the deltas are added to per-GPU totals. Only the
totals are published, so neither a restart nor a GPU set that changes can make a
published counter decrease.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class DeltaTracker:
    """Last raw value per engine series; :meth:`delta` says what happened since."""

    def __init__(self) -> None:
        self._last: dict[Hashable, float] = {}

    def delta(self, key: Hashable, value: float, jitter: float = 0.0) -> float:
        """Growth since the last call; the whole value on first sight or after a reset.

        A dip of at most ``jitter`` (a share of the last value) is rounding in a derived
        counter, not a reset: it counts as no growth, and the higher value is kept so the
        same tokens are not counted twice when it climbs back.
        """
        last = self._last.get(key)
        if last is not None and last - jitter * abs(last) <= value < last:
            return 0.0
        self._last[key] = value
        if last is None or value < last:
            return max(value, 0.0)
        return value - last

    def rise(self, key: Hashable, value: float) -> float:
        """How much a gauge rose since the last call (its value on first sight); a fall
        counts as nothing."""
        last = self._last.get(key)
        self._last[key] = value
        if last is None:
            return max(value, 0.0)
        return max(value - last, 0.0)

    def forget_where(self, gone: Callable[[Any], bool]) -> None:
        """Drop series for which ``gone(key)`` holds (a target removed)."""
        for key in [k for k in self._last if gone(k)]:
            del self._last[key]


class Totals:
    """Monotonic per-key sums of deltas."""

    def __init__(self) -> None:
        self._totals: dict[Hashable, float] = {}

    def add(self, key: Hashable, amount: float) -> None:
        if amount > 0:
            self._totals[key] = self._totals.get(key, 0.0) + amount
        else:
            self._totals.setdefault(key, 0.0)

    def items(self) -> list[tuple[Hashable, float]]:
        return list(self._totals.items())
