"""Debouncing a per-window verdict so a regime or flag does not flap.

A new value is entered only after it was seen ``enter`` windows in a row, and the current
value is left only after it was absent ``leave`` windows in a row; until both hold, the current
value stays. ``enter_for`` / ``leave_for`` override the counts for particular values and
``immediate`` values are entered at once. The model enters ``unknown`` at once (when the
evidence goes we stop claiming a regime now) and leaves it without the ``leave`` wait
(nothing was claimed that needs un-claiming); a busy_unproductive flag turns off after
``leave`` clean windows, with no separate ``enter`` wait for "off".
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class Hysteresis(Generic[T]):
    def __init__(
        self,
        initial: T,
        enter: int,
        leave: int,
        enter_for: Mapping[T, int] | None = None,
        leave_for: Mapping[T, int] | None = None,
        immediate: frozenset[T] = frozenset(),
    ) -> None:
        self.state: T = initial
        self.enter = max(enter, 1)
        self.leave = max(leave, 1)
        self.enter_for = dict(enter_for or {})
        self.leave_for = dict(leave_for or {})
        self.immediate = immediate
        self._candidate: T | None = None
        self._streak = 0
        self._absent = 0

    def update(self, raw: T, at_once: bool = False) -> T:
        """Feed one window's raw value; return the debounced value. ``at_once`` enters
        ``raw`` now: the caller judged this one window conclusive."""
        if raw == self.state:
            self._candidate, self._streak, self._absent = None, 0, 0
            return self.state
        self._absent += 1
        if raw == self._candidate:
            self._streak += 1
        else:
            self._candidate, self._streak = raw, 1
        enter = self.enter_for.get(raw, self.enter)
        leave = self.leave_for.get(self.state, self.leave)
        if at_once or raw in self.immediate or (self._streak >= enter and self._absent >= leave):
            self.force(raw)
        return self.state

    def force(self, value: T) -> None:
        """Set the value now, forgetting any pending candidate."""
        self.state = value
        self._candidate, self._streak, self._absent = None, 0, 0
