"""Counters that never go backwards, never jump beyond physics, and never grow series.

Each engine counter is turned into a delta per scrape (a drop means the engine restarted:
the new value is all new work). A delta is *accepted* only when it is finite and below a
physical ceiling (``ceiling per GPU per second x GPUs x seconds since the target's last
reading``); refused deltas move the baseline on and are counted. Only sums of accepted
deltas are published, so neither a restart, a hostile engine nor a GPU set that changes
can make a published counter decrease, jump or turn non-finite.

The per-target :class:`Ledger` also bounds what a target may add: at most
``max_models`` model label values (cut to ``max_label_length``), at most
:data:`SERIES_PER_MODEL` tracked engine series per admitted model, and models no reading
mentioned for ``stale_after`` seconds are forgotten (freeing their place).

A target's first reading (or a restart) counts an engine counter whole. A series that
appears later on an engine that did not restart (engines create series lazily: per model,
per LoRA adapter, per finish reason) counts from 0 too, but only up to what the engine's
own total of that signal (the sum of its series) grew past its highest value so far: the
*mark*. Tokens a client received are counted once, and an engine that churns model names
(each new name at the engine's whole count) adds nothing, because its total never passes
the mark; the part of a first value refused so is counted as ``new_series``. A counter
going down resets the mark of its signal, as a restart resets every mark.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter.sources.serving.config import ServingConfig
from exporter.sources.serving.signals import SIGNALS

SignalKey = tuple[str, str, str]
"""(signal, model, gpu_uuid), as the adapter keys engine values."""

DROP_REASONS = (
    "non_finite",
    "negative",
    "implausible",
    "max_models",
    "max_series",
    "label_too_long",
    "new_series",
    "gpus_refused",
)
"""Why an engine value was refused or altered; every target shows each (from 0)."""

FIRST_READING_SECONDS = 365 * 86400.0
"""How long an engine may have run before its first reading: its counters may hold a
year of work at the ceiling, no more (a counter at 1e308 is no engine's history)."""
SLACK_SECONDS = 1.0
"""Added to the time between readings: an engine publishes counters in bursts."""
SERIES_PER_MODEL = 128
"""Engine series (signal x GPU UUID) tracked per admitted model, on average:
a target tracks at most this times max_models (Triton: 6 signals x 8 GPUs per model)."""


@dataclass(frozen=True)
class Limits:
    """The bounds a target's readings pass; see ``ServingConfig`` for each."""

    max_models: int = 8
    max_label_length: int = 200
    stale_after: float = 300.0
    tokens_per_second: float = 2e6

    @classmethod
    def of(cls, config: ServingConfig) -> Limits:
        return cls(
            config.max_models_per_target,
            config.max_label_length,
            config.stale_after,
            config.max_tokens_per_second_per_gpu,
        )

    def ceiling(self, signal: str) -> float:
        """Largest plausible growth of ``signal`` per GPU per second: the configured one
        for tokens, else the signal's own (exporter/sources/serving/signals.py)."""
        spec = SIGNALS[signal]
        return self.tokens_per_second if spec.is_token else spec.ceiling


class DeltaTracker:
    """Last raw value per engine series; :meth:`delta` says what happened since."""

    def __init__(self) -> None:
        self._last: dict[Hashable, float] = {}

    def __len__(self) -> int:
        return len(self._last)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._last

    def last(self, key: Hashable) -> float | None:
        return self._last.get(key)

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

    def clear(self) -> None:
        self._last.clear()


@dataclass(frozen=True)
class Step:
    """What one reading of one target yields."""

    deltas: dict[SignalKey, float]
    """Accepted growth per counter series (only these may reach a published total)."""
    restarted: bool = False
    """A new start token with a counter gone down or after failed scrapes: every counter
    was counted whole. (A counter that goes down without a new token is reset alone.)"""
    flapped: bool = False
    """The start token changed but nothing showed a restart: it added nothing."""


class Ledger:
    """One target's counter history and bounds; every method is O(series of the target)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._tracker = DeltaTracker()
        self._models: dict[str, float] = {}
        """Admitted model label -> when a reading last mentioned it (monotonic)."""
        self._marks: dict[str, float] = {}
        """Signal -> the highest total of its series since the first reading or restart."""
        self._last_reading: float | None = None
        self._gap = False
        self._started = ""
        self.dropped: Counter[str] = Counter(dict.fromkeys(DROP_REASONS, 0))
        """Engine values refused or altered since the target appeared, by reason."""

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self._models)

    def failed(self) -> None:
        """A scrape failed: the engine may restart unseen before the next reading."""
        self._gap = True

    def count(self, reasons: Mapping[str, int]) -> None:
        """Values the adapter refused (non_finite, negative)."""
        self.dropped.update(reasons)

    def admit(self, model: str, now: float) -> str | None:
        """The label ``model`` is published under, or None when the target already has
        ``max_models`` others (counted once per value)."""
        name = model[: self.limits.max_label_length]
        if name != model:
            self.dropped["label_too_long"] += 1
        if name in self._models:
            self._models[name] = now
            return name
        if len(self._models) >= self.limits.max_models:
            self.dropped["max_models"] += 1
            return None
        self._models[name] = now
        return name

    def relabel(
        self, values: Mapping[SignalKey, float], default_model: str, now: float
    ) -> dict[SignalKey, float]:
        """``values`` under admitted, bounded model labels (the default model for series
        that name none); values of models over the cap are left out. Two names cut to one
        label add up."""
        out: dict[SignalKey, float] = {}
        names: dict[str, str | None] = {}
        for key, value in values.items():
            signal, model, uuid = key
            raw = model or default_model
            if raw not in names:
                names[raw] = self.admit(raw, now)
            elif names[raw] is None:
                self.dropped["max_models"] += 1
            name = names[raw]
            if name is None:
                continue
            new = (signal, name, uuid)
            out[new] = out.get(new, 0.0) + value
        return out

    def expire(self, now: float) -> list[str]:
        """Forget models no reading mentioned for ``stale_after`` seconds; returns them."""
        cutoff = now - self.limits.stale_after
        gone = [m for m, seen in self._models.items() if seen < cutoff]
        for model in gone:
            del self._models[model]
        if gone:
            names = set(gone)
            self._tracker.forget_where(lambda key: key[1] in names)
        return gone

    def step(
        self,
        values: Mapping[SignalKey, float],
        *,
        counters: Iterable[str],
        now: float,
        gpus: Callable[[SignalKey], int],
        rises: frozenset[str] = frozenset(),
        jitter: Mapping[str, float] | None = None,
        started: str = "",
    ) -> Step:
        """Accepted deltas of the counter signals in ``values`` (already relabelled)."""
        wanted = frozenset(counters)
        jitter = jitter or {}
        keys = [k for k in values if k[0] in wanted]
        restarted, flapped = self._restart(keys, values, jitter, started)
        elapsed = (
            FIRST_READING_SECONDS
            if self._last_reading is None
            else max(now - self._last_reading, 0.0)
        )
        whole = self._last_reading is None or restarted
        resets = {k[0] for k in keys if self._fell(k, values[k], jitter.get(k[0], 0.0))}
        growth: dict[SignalKey, float] = {}
        lazy: list[SignalKey] = []
        for key in keys:
            new = key not in self._tracker
            raw = self._growth(key, values[key], rises, jitter)
            if raw is not None:
                growth[key] = raw
                if new and not whole:
                    lazy.append(key)
        self._credit(growth, lazy, values, whole, resets)
        deltas: dict[SignalKey, float] = {}
        for key, raw in growth.items():
            allowed = self.limits.ceiling(key[0]) * max(gpus(key), 1) * (elapsed + SLACK_SECONDS)
            if not math.isfinite(raw) or raw < 0 or raw > allowed:
                self.dropped["implausible"] += 1
                continue
            deltas[key] = raw
        self._last_reading = now
        self._gap = False
        return Step(deltas, restarted, flapped)

    def _restart(
        self, keys: list[SignalKey], values: Mapping[SignalKey, float],
        jitter: Mapping[str, float], started: str,
    ) -> tuple[bool, bool]:
        """(restarted, flapped) for a reading with start token ``started``; a restart
        clears the history so every counter is counted whole."""
        restarted = flapped = False
        if started and self._started and started != self._started:
            if self._went_down(keys, values, jitter) or self._gap:
                restarted = True
                self._tracker.clear()
                self._marks.clear()
            else:
                flapped = True
        if started:
            self._started = started
        return restarted, flapped

    def _growth(
        self, key: SignalKey, value: float, rises: frozenset[str], jitter: Mapping[str, float],
    ) -> float | None:
        """Raw growth of one series since its last reading (its value on first sight);
        None when it is past the series cap and not tracked."""
        if key not in self._tracker and (
            len(self._tracker) >= SERIES_PER_MODEL * self.limits.max_models
        ):
            self.dropped["max_series"] += 1
            return None
        signal = key[0]
        if signal in rises:
            return self._tracker.rise(key, value)
        return self._tracker.delta(key, value, jitter.get(signal, 0.0))

    def _credit(
        self, growth: dict[SignalKey, float], lazy: list[SignalKey],
        values: Mapping[SignalKey, float], whole: bool, resets: set[str],
    ) -> None:
        """Cut the first values of ``lazy`` series (in place) to what their signal's total
        grew past its mark beyond the growth of the series already known; move the marks."""
        totals: dict[str, float] = {}
        known: dict[str, float] = {}
        for key, raw in growth.items():
            totals[key[0]] = totals.get(key[0], 0.0) + max(values[key], 0.0)
            known[key[0]] = known.get(key[0], 0.0) + (0.0 if key in lazy else raw)
        room = {s: total - self._marks.get(s, 0.0) - known[s] for s, total in totals.items()}
        for key in sorted(lazy):
            take = min(growth[key], max(room[key[0]], 0.0))
            if take < growth[key]:
                self.dropped["new_series"] += 1
            growth[key] = take
            room[key[0]] -= take
        for signal, total in totals.items():
            reset = whole or signal in resets
            self._marks[signal] = total if reset else max(self._marks.get(signal, 0.0), total)

    def _fell(self, key: SignalKey, value: float, jitter: float) -> bool:
        """Whether a known series went down by more than its rounding jitter."""
        last = self._tracker.last(key)
        return last is not None and value < last - jitter * abs(last)

    def _went_down(
        self, keys: Iterable[SignalKey], values: Mapping[SignalKey, float],
        jitter: Mapping[str, float],
    ) -> bool:
        return any(self._fell(key, values[key], jitter.get(key[0], 0.0)) for key in keys)


ModelKey = tuple[str, str, str]
"""(gpu, model, engine): one published row."""


class Published:
    """Per-row sums of accepted deltas, and which targets feed each row.

    A row lives while a target fed it within ``stale_after``; a target removed stops
    feeding at once. A row fed by several targets stays until the last one goes, so a
    published counter only ever disappears, never decreases.
    """

    def __init__(self) -> None:
        self._rows: dict[ModelKey, dict[str, float]] = {}
        self._owners: dict[ModelKey, dict[str, float]] = {}

    def touch(self, key: ModelKey, owner: str, now: float) -> dict[str, float]:
        """The row ``key`` (created empty), fed by ``owner`` at ``now``."""
        self._owners.setdefault(key, {})[owner] = now
        return self._rows.setdefault(key, {})

    def add(self, key: ModelKey, name: str, amount: float, owner: str, now: float) -> None:
        row = self.touch(key, owner, now)
        total = row.get(name, 0.0) + max(amount, 0.0)
        if math.isfinite(total):
            row[name] = total
        else:  # unreachable under the ceilings; a counter must never turn +Inf
            row.setdefault(name, 0.0)

    def release(self, owner: str) -> None:
        """``owner`` (a target) is gone: rows only it fed go with it."""
        for key in [k for k, owners in self._owners.items() if owner in owners]:
            self._drop_owner(key, owner)

    def expire(self, now: float, stale_after: float) -> None:
        cutoff = now - stale_after
        for key, owners in list(self._owners.items()):
            for owner in [o for o, seen in owners.items() if seen < cutoff]:
                self._drop_owner(key, owner)

    def _drop_owner(self, key: ModelKey, owner: str) -> None:
        owners = self._owners[key]
        owners.pop(owner, None)
        if not owners:
            del self._owners[key]
            self._rows.pop(key, None)

    def rows(self) -> dict[ModelKey, dict[str, float]]:
        return self._rows

    def __len__(self) -> int:
        return len(self._rows)
