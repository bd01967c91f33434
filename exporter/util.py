"""Small helpers shared by the stages."""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any


def finite(value: float | None) -> float | None:
    """The one NaN rule: a NaN or infinite number was not read, so it is None (never 0,
    which would be a reading)."""
    if value is None or not math.isfinite(value):
        return None
    return value


def clamp_ratio(value: float | None) -> float | None:
    """A ratio held to 0..1; not read (None, NaN, infinite) stays None."""
    value = finite(value)
    return None if value is None else min(max(value, 0.0), 1.0)


class OnChange:
    """Logs an event once each time a tracked state changes, never on every poll.

    ``log(key, state, initial, event=..., level=..., **fields)`` logs ``event`` with
    ``state`` and ``fields`` when ``state`` differs from the last one seen for ``key``
    (``initial`` before the first call) and says whether it did.
    """

    def __init__(self, logger: Any) -> None:
        self._logger = logger
        self._last: dict[Hashable, object] = {}

    def __call__(
        self,
        key: Hashable,
        state: object,
        initial: object,
        *,
        event: str,
        level: str = "info",
        **fields: Any,
    ) -> bool:
        previous = self._last.get(key, initial)
        self._last[key] = state
        if previous == state:
            return False
        getattr(self._logger, level)(event, state=state, **fields)
        return True

    def reset(self, key: Hashable, state: object) -> None:
        """Record ``state`` for ``key`` without logging."""
        self._last[key] = state
