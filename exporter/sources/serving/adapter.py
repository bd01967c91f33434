"""Recognising an engine from its families and reading normalised signals through its
alias table.

A :class:`Reading` is what one scrape of one target said, already in engine-neutral terms:
signal values per model (and per GPU UUID where the engine labels one, Triton), plus the
GPU UUIDs the engine named for each model.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Set
from dataclasses import dataclass, field, replace

from exporter.sources.serving.engines import TABLES, EngineTable, Rule
from exporter.sources.serving.exposition import Family, scan
from exporter.sources.serving.signals import SIGNALS

SignalKey = tuple[str, str, str]
"""(signal, model, gpu_uuid): gpu_uuid is "" when the engine labels none."""


@dataclass(frozen=True)
class Reading:
    engine: str
    version: str
    values: Mapping[SignalKey, float]
    live: Mapping[str, bool] = field(default_factory=dict)
    model_gpus: Mapping[str, frozenset[str]] = field(default_factory=dict)
    derived: frozenset[str] = frozenset()
    """Signals computed from several families: may dip slightly without a restart."""
    minus: Mapping[str, str] = field(default_factory=dict)
    """signal -> the signal whose growth is taken off its growth (see ``Rule.minus``)."""
    rises: frozenset[str] = frozenset()
    """Counter signals read from a gauge: only rises count (see ``Rule.rises``)."""
    started: str = ""
    """A token that changes when the engine process restarts ("" when unknown): its
    ``process_start_time_seconds``, else the ``Process-Start-Time-Unix`` header."""
    dropped: Mapping[str, int] = field(default_factory=dict)
    """Engine values this scrape refused, by reason (non_finite, negative)."""
    settle: Mapping[SignalKey, tuple[float, bool]] = field(default_factory=dict)
    """key -> (the engine's own exact count, whether nothing is in flight) for values that
    are live estimates (see ``Rule.settle``); :class:`Settler` uses it."""

    def net(self) -> dict[SignalKey, float]:
        """Values with each ``minus`` applied (what a first scrape attributes)."""
        out = dict(self.values)
        for key in self.values:
            other = self.minus.get(key[0])
            if other is not None:
                out[key] = max(out[key] - self.values.get((other, *key[1:]), 0.0), 0.0)
        return out

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(sorted({key[1] for key in self.values} | set(self.model_gpus)))


class UnknownEngine(ValueError):
    """No alias table matches the families of a target."""


READS: frozenset[str] = frozenset().union(*(t.reads() for t in TABLES))
"""Every family some table reads: the only ones a body is parsed for."""
PREFIXES: tuple[str, ...] = tuple(sorted({p for t in TABLES for p in t.requires}))


def detect(families: Mapping[str, Family], engine: str = "") -> EngineTable:
    """The table whose families occur most; ``engine`` (from config) narrows the choice."""
    names = set(families)
    prefixes = {p for p in PREFIXES if any(n.startswith(p) for n in names)}
    return _choose(names, prefixes, len(names), engine)


def _choose(names: Set[str], prefixes: Set[str], count: int, engine: str) -> EngineTable:
    best: EngineTable | None = None
    best_score = 0
    for table in TABLES:
        if engine and table.engine != engine:
            continue
        if not all(p in prefixes for p in table.requires):
            continue
        score = len(table.families() & names)
        if score > best_score:
            best, best_score = table, score
    if best is None:
        wanted = f"engine {engine!r}" if engine else "any known engine"
        raise UnknownEngine(f"no families of {wanted} among {count} families")
    return best


def read_body(text: str, engine: str = "", default_model: str = "") -> Reading:
    """Recognise and read a scraped body, parsing only the families the recognised
    engine's table reads (see ``exposition.scan``)."""
    found = scan(text, READS, PREFIXES)
    table = _choose(found.present, found.prefixes, found.count, engine)
    return read(table, found.parse(table.needs(found.present)), default_model)


def read(table: EngineTable, families: Mapping[str, Family], default_model: str = "") -> Reading:
    """Every signal of ``table`` found in ``families``."""
    values: dict[SignalKey, float] = {}
    counts: dict[SignalKey, int] = {}
    dropped: Counter[str] = Counter()
    bad: set[SignalKey] = set()
    live: dict[str, bool] = {}
    derived: set[str] = set()
    rises: set[str] = set()
    minus: dict[str, str] = {}
    settle: dict[SignalKey, tuple[float, bool]] = {}
    for signal, rules in table.signals.items():
        rule = next((x for x in rules if _applies(x, families)), None)
        if rule is None:
            continue
        if rule.settle in families:
            settle.update(_settle(table, rule, signal, families, default_model))
        live[signal] = rule.live
        if rule.derived:
            derived.add(signal)
        if rule.rises:
            rises.add(signal)
        if rule.minus:
            minus[signal] = rule.minus
        factors = _factors(families[rule.times]) if rule.times else None
        extra = _factors(families[rule.plus]) if rule.plus in families else None
        for family in rule.families:
            if family in families:
                _read_rule(
                    table, rule, signal, families[family], default_model, values, counts,
                    factors, dropped, bad, extra,
                )
    for key in bad:
        # A sum missing one rank would look like a counter reset: skip the whole value
        # this scrape; the next good one carries the growth.
        values.pop(key, None)
    for key, count in counts.items():
        if SIGNALS[key[0]].agg == "mean" and count > 1 and key in values:
            values[key] /= count
    return Reading(
        table.engine,
        table.version,
        values,
        live,
        _model_gpus(table, families),
        frozenset(derived),
        minus,
        frozenset(rises),
        _started(families),
        dict(dropped),
        {key: found for key, found in settle.items() if key in values},
    )


def _settle(
    table: EngineTable,
    rule: Rule,
    signal: str,
    families: Mapping[str, Family],
    default_model: str,
) -> dict[SignalKey, tuple[float, bool]]:
    """The exact count ``rule.settle`` names per key, and whether the engine is idle (its
    ``rule.idle`` gauge reads 0 everywhere; never idle when that gauge is missing)."""
    exact: dict[SignalKey, float] = {}
    bad: set[SignalKey] = set()
    plain = Rule((rule.settle,), match=rule.match)
    _read_rule(table, plain, signal, families[rule.settle], default_model, exact, {}, bad=bad)
    gauge = families.get(rule.idle) if rule.idle else None
    idle = gauge is not None and all(s.value == 0 for s in gauge.samples)
    return {key: (value, idle) for key, value in exact.items() if key not in bad}


def _started(families: Mapping[str, Family]) -> str:
    """The exposition's ``process_start_time_seconds`` as a token ("" when absent)."""
    family = families.get("process_start_time_seconds")
    values = sorted(s.value for s in family.samples) if family is not None else []
    return ",".join(f"{v:.3f}" for v in values)


def _applies(rule: Rule, families: Mapping[str, Family]) -> bool:
    present = any(f in families for f in rule.families)
    return present and (not rule.times or rule.times in families)


def _factors(family: Family) -> dict[frozenset[tuple[str, str]], float]:
    """A multiplier family's values by label set."""
    return {frozenset(s.labels.items()): s.value for s in family.samples}


def _read_rule(
    table: EngineTable,
    rule: Rule,
    signal: str,
    family: Family,
    default_model: str,
    values: dict[SignalKey, float],
    counts: dict[SignalKey, int],
    factors: Mapping[frozenset[tuple[str, str]], float] | None = None,
    dropped: Counter[str] | None = None,
    bad: set[SignalKey] | None = None,
    extra: Mapping[frozenset[tuple[str, str]], float] | None = None,
) -> None:
    """Add ``family``'s matching samples to ``values``. A sample that is not a finite,
    non-negative number (no engine signal can be) is counted in ``dropped`` and its key put
    in ``bad``: it is never republished."""
    wanted = family.name + _suffix(family, rule)
    agg = SIGNALS[signal].agg
    for sample in family.samples:
        if sample.name != wanted or not _matches(sample.labels, rule):
            continue
        labels = frozenset(sample.labels.items())
        factor = 1.0
        if factors is not None:
            found = factors.get(labels)
            if found is None:
                continue
            factor = found
        key = (
            signal,
            _model(table, sample.labels, default_model),
            sample.labels.get(table.gpu_label, "") if table.gpu_label else "",
        )
        raw = sample.value * rule.scale * factor
        value, reason = _product(raw, labels, extra) if factors is not None else (raw, _bad(raw))
        if reason:
            if dropped is not None:
                dropped[reason] += 1
            if bad is not None:
                bad.add(key)
            continue
        if agg == "max":
            values[key] = max(values.get(key, value), value)
        else:
            values[key] = values.get(key, 0.0) + value
        counts[key] = counts.get(key, 0) + 1


def _bad(value: float) -> str:
    """Why ``value`` cannot be an engine signal ("" when it can)."""
    return "non_finite" if not math.isfinite(value) else "negative" if value < 0 else ""


def _product(
    value: float,
    labels: frozenset[tuple[str, str]],
    extra: Mapping[frozenset[tuple[str, str]], float] | None,
) -> tuple[float, str]:
    """A ``times`` product as a whole count plus the ``plus`` family's same-labelled
    value, and why it is refused ("" when it is not)."""
    reason = _bad(value)
    if reason:
        return value, reason
    # A count times an average per count is a whole count: rounding undoes the
    # average's 6-digit print exactly (llama.cpp, below ~10^5 tokens).
    added = extra.get(labels, 0.0) if extra else 0.0
    return float(round(value)) + added, _bad(added)


def _suffix(family: Family, rule: Rule) -> str:
    if rule.suffix:
        return rule.suffix
    return "_total" if family.type == "counter" else ""


def _matches(sample_labels: Mapping[str, str], rule: Rule) -> bool:
    return all(sample_labels.get(k, "") in allowed for k, allowed in rule.match)


def _model(table: EngineTable, sample_labels: Mapping[str, str], default: str) -> str:
    for label in table.model_labels:
        value = sample_labels.get(label)
        if value:
            return value
    return default


def _model_gpus(table: EngineTable, families: Mapping[str, Family]) -> dict[str, frozenset[str]]:
    """GPU UUIDs the engine itself names per model (Triton's per-model ``gpu_uuid``)."""
    if not table.gpu_label:
        return {}
    found: dict[str, set[str]] = {}
    for family in families.values():
        for sample in family.samples:
            uuid = sample.labels.get(table.gpu_label)
            model = _model(table, sample.labels, "")
            if uuid and model:
                found.setdefault(model, set()).add(uuid)
    return {model: frozenset(uuids) for model, uuids in found.items()}


SETTLE_SLACK = 1e-3
"""A live estimate may dip this share from the engine's 6-digit print without a restart."""


@dataclass(frozen=True)
class _Held:
    published: float
    exact: float
    live: float


class Settler:
    """Per target: a live estimate that settles on the engine's exact count.

    While requests are in flight the published value is the larger of the live estimate
    and the exact count (which only counts finished requests); with nothing in flight it
    is the exact count. It never goes down: an estimate that overshot is held until the
    engine's own count passes it. When the exact count or the estimate falls (a new
    process) it starts afresh, so the accumulator sees the drop as a restart. A changed
    start token alone changes nothing here: publishing less because of it would turn a
    flapping token into a fake restart; the accumulator judges the token itself.
    """

    def __init__(self) -> None:
        self._held: dict[SignalKey, _Held] = {}

    def apply(self, reading: Reading) -> Reading:
        if not reading.settle:
            return reading
        values = dict(reading.values)
        for key, (exact, idle) in reading.settle.items():
            live = values.get(key)
            if live is None:
                continue
            wanted = exact if idle else max(exact, live)
            held = self._held.get(key)
            fresh = (
                held is None
                or exact < held.exact
                or live < held.live - SETTLE_SLACK * held.live
            )
            published = wanted if fresh or held is None else max(held.published, wanted)
            self._held[key] = _Held(published, exact, live)
            values[key] = published
        return replace(reading, values=values)
