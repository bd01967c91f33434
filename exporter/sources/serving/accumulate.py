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

A target's first reading, or a new engine process (a start token whose counters do not
continue the current ones: a restart, another replica behind the URL), counts an engine
counter whole; each process keeps its own last values, so replicas that alternate behind
one URL are each counted once. A series that vanishes (a model unloaded, a name that
changed) is remembered; a series that appears later counts from 0, unless it continues
a vanished one of the same signal and GPU (at or above its last value): then it is that
counter under a new name, and only its growth counts. So a renamed or flipping counter
and a model name churned at the engine's whole count add nothing, while a model loaded
lazily after another was unloaded counts its new tokens. :class:`Ledger` states the
invariant; tests/serving/test_ledger_exact.py checks it over random event sequences.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
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

    def series(self) -> list[Any]:
        return list(self._last)

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


MAX_PROCESSES = 8
"""Engine processes (start tokens) remembered per target: replicas behind one URL, a
process that restarted, each keeps its own counters' last values."""
MAX_TOKENS = 4 * MAX_PROCESSES
"""Start tokens remembered per target (a flapping start time maps many to one process);
the least recently seen goes first."""


class _Process:
    """What one engine process (one start token, or none) showed: the last value of each
    counter series, and the series that vanished, for a later one to continue."""

    __slots__ = ("fresh", "tracker", "vanished")

    def __init__(self) -> None:
        self.tracker = DeltaTracker()
        self.vanished: dict[SignalKey, float] = {}
        """Series no longer shown -> their last value (oldest first, bounded)."""
        self.fresh = True
        """No reading of it yet: its first counts every counter whole."""

    def vanish(self, key: Any, limit: int) -> None:
        last = self.tracker.last(key)
        self.tracker.forget_where(lambda k: k == key)
        if last is not None:
            self.vanished.pop(key, None)
            self.vanished[key] = last
            while len(self.vanished) > limit:
                del self.vanished[next(iter(self.vanished))]


class Ledger:
    """One target's counter history and bounds; every method is O(series of the target).

    The invariant (docs/security.md "Every token a client received is counted once"): the
    total a target adds equals, over every counter series of every engine process behind
    it, the highest value a scrape saw, counted once. A process is its start token; a new
    token whose counters continue the current ones is the same process (a flapping start
    time), one whose counters do not is a new process (a restart, another replica) and
    counts whole. A series that vanishes is remembered with its last value; a series that
    appears later counts from 0, unless it continues a vanished one (at or above its last
    value, same signal and GPU): then it is that counter under a new name and only its
    growth counts. So a rename, a name that flips back and forth and a model churned at
    the engine's whole count count once, and a model unloaded then loaded lazily counts
    its new tokens. What can be missed is bounded by the last unseen interval: tokens
    served after a counter's last scrape and before it vanished, and a new series whose
    first value happens to be at or above a vanished one's (what it served before its
    first scrape, at most that value).
    """

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._procs: OrderedDict[str, _Process] = OrderedDict()
        """Start token -> its process (tokens of one flapping process share one)."""
        self._proc = _Process()
        self._token: str | None = None
        self._models: dict[str, float] = {}
        """Admitted model label -> when a reading last mentioned it (monotonic)."""
        self._last_reading: float | None = None
        self._gap = False
        self.dropped: Counter[str] = Counter(dict.fromkeys(DROP_REASONS, 0))
        """Engine values refused or altered since the target appeared, by reason."""

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self._models)

    @property
    def _tracker(self) -> DeltaTracker:
        """The current process's last values."""
        return self._proc.tracker

    @property
    def _bound(self) -> int:
        return SERIES_PER_MODEL * self.limits.max_models

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
        """Forget models no reading mentioned for ``stale_after`` seconds; returns them.
        Their series are remembered as vanished, so a name churned back in later
        continues them instead of counting the engine's total again."""
        cutoff = now - self.limits.stale_after
        gone = [m for m, seen in self._models.items() if seen < cutoff]
        for model in gone:
            del self._models[model]
        if gone:
            names = set(gone)
            for proc in {id(p): p for p in (*self._procs.values(), self._proc)}.values():
                for key in [k for k in proc.tracker.series() if k[1] in names]:
                    proc.vanish(key, self._bound)
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
        restarted, flapped = self._process(keys, values, jitter, started)
        proc = self._proc
        elapsed = (
            FIRST_READING_SECONDS
            if self._last_reading is None
            else max(now - self._last_reading, 0.0)
        )
        whole = proc.fresh
        resets = {k[0] for k in keys if self._fell(k, values[k], jitter.get(k[0], 0.0))}
        for signal in resets:  # a counter went down: the process restarted unseen
            for key in [k for k in proc.vanished if k[0] == signal]:
                del proc.vanished[key]
        present = set(keys)
        for key in [k for k in proc.tracker.series() if k not in present]:
            if key[0] in wanted and key[0] not in rises:
                proc.vanish(key, self._bound)
        growth: dict[SignalKey, float] = {}
        for key in sorted(keys, key=lambda k: -values[k]):
            raw = self._growth(key, values[key], rises, jitter, whole)
            if raw is not None:
                growth[key] = raw
        deltas: dict[SignalKey, float] = {}
        for key, raw in growth.items():
            allowed = self.limits.ceiling(key[0]) * max(gpus(key), 1) * (elapsed + SLACK_SECONDS)
            if not math.isfinite(raw) or raw < 0 or raw > allowed:
                self.dropped["implausible"] += 1
                continue
            deltas[key] = raw
        proc.fresh = False
        self._last_reading = now
        self._gap = False
        return Step(deltas, restarted, flapped)

    def _process(
        self, keys: list[SignalKey], values: Mapping[SignalKey, float],
        jitter: Mapping[str, float], started: str,
    ) -> tuple[bool, bool]:
        """Select the process a reading with start token ``started`` comes from:
        (restarted, flapped). A token seen before is its process (a replica behind the
        URL comes back); a new one is the current process when its counters continue
        (a flapping start time) and no scrape failed in between, else a new process."""
        restarted = flapped = False
        if self._token is None or not started or started == self._token:
            if self._token is None or (started and not self._procs):
                self._procs[started] = self._proc
            self._token = started or self._token
            return restarted, flapped
        known = self._procs.get(started)
        if known is not None:
            self._proc = known
            self._procs.move_to_end(started)
        elif self._token and not self._gap and self._continues(keys, values, jitter):
            flapped = True
            self._procs[started] = self._proc
        else:
            restarted = True
            self._proc = self._procs[started] = _Process()
        self._token = started
        while len(self._procs) > MAX_TOKENS or (
            len(set(map(id, self._procs.values()))) > MAX_PROCESSES
        ):
            self._procs.popitem(last=False)
        return restarted, flapped

    def _continues(
        self, keys: list[SignalKey], values: Mapping[SignalKey, float],
        jitter: Mapping[str, float],
    ) -> bool:
        """Whether the current process's counters go on in this reading: one it knows is
        shown, and none went down."""
        known = [k for k in keys if k in self._tracker]
        return bool(known) and not any(
            self._fell(k, values[k], jitter.get(k[0], 0.0)) for k in known
        )

    def _growth(
        self, key: SignalKey, value: float, rises: frozenset[str],
        jitter: Mapping[str, float], whole: bool,
    ) -> float | None:
        """Raw growth of one series since its last reading; for a series first seen, its
        value, or its growth past the vanished series it continues; None when it is past
        the series cap and not tracked."""
        tracker = self._tracker
        if key not in tracker and len(tracker) >= self._bound:
            self.dropped["max_series"] += 1
            return None
        signal = key[0]
        if signal in rises:
            return tracker.rise(key, value)
        if key in tracker or whole:
            return tracker.delta(key, value, jitter.get(signal, 0.0))
        base = self._continued(key, value)
        raw = tracker.delta(key, value, jitter.get(signal, 0.0))
        if base is None:
            return raw
        if base[0] != key:
            self.dropped["new_series"] += 1
        return max(value - base[1], 0.0)

    def _continued(self, key: SignalKey, value: float) -> tuple[SignalKey, float] | None:
        """The vanished series of the same signal and GPU that ``key`` continues (the
        highest last value at or below ``value``), taken out of memory; its own old
        entry goes in any case (the name is shown again)."""
        vanished = self._proc.vanished
        own = vanished.pop(key, None)
        best: tuple[SignalKey, float] | None = None
        if own is not None and own <= value:
            best = (key, own)
        for other, last in vanished.items():
            same = other[0] == key[0] and other[2] == key[2]
            if same and last <= value and (best is None or last > best[1]):
                best = (other, last)
        if best is not None and best[0] != key:
            del vanished[best[0]]
        return best

    def _fell(self, key: SignalKey, value: float, jitter: float) -> bool:
        """Whether a known series went down by more than its rounding jitter."""
        last = self._tracker.last(key)
        return last is not None and value < last - jitter * abs(last)


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
