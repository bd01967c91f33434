"""Small helpers shared by the stages."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any


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
