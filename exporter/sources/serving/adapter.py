"""Recognising an engine from its families and reading normalised signals through its
alias table.

A :class:`Reading` is what one scrape of one target said, already in engine-neutral terms:
signal values per model (and per GPU UUID where the engine labels one, Triton), plus the
GPU UUIDs the engine named for each model.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.sources.serving.engines import SIGNALS, TABLES, EngineTable, Rule
from exporter.sources.serving.exposition import Family

SignalKey = tuple[str, str, str, str]
"""(signal, model, gpu_uuid, reason): gpu_uuid and reason are "" when not labelled."""


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


def detect(families: Mapping[str, Family], engine: str = "") -> EngineTable:
    """The table whose families occur most; ``engine`` (from config) narrows the choice."""
    names = set(families)
    best: EngineTable | None = None
    best_score = 0
    for table in TABLES:
        if engine and table.engine != engine:
            continue
        if not all(any(n.startswith(p) for n in names) for p in table.requires):
            continue
        score = len(table.families() & names)
        if score > best_score:
            best, best_score = table, score
    if best is None:
        wanted = f"engine {engine!r}" if engine else "any known engine"
        raise UnknownEngine(f"no families of {wanted} among {len(names)} families")
    return best


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
    for signal, rules in table.signals.items():
        rule = next((x for x in rules if _applies(x, families)), None)
        if rule is None:
            continue
        live[signal] = rule.live
        if rule.derived:
            derived.add(signal)
        if rule.rises:
            rises.add(signal)
        if rule.minus:
            minus[signal] = rule.minus
        factors = _factors(families[rule.times]) if rule.times else None
        for family in rule.families:
            if family in families:
                _read_rule(
                    table, rule, signal, families[family], default_model, values, counts,
                    factors, dropped, bad,
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
    )


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
) -> None:
    """Add ``family``'s matching samples to ``values``. A sample that is not a finite,
    non-negative number (no engine signal can be) is counted in ``dropped`` and its key put
    in ``bad``: it is never republished."""
    wanted = family.name + _suffix(family, rule)
    agg = SIGNALS[signal].agg
    for sample in family.samples:
        if sample.name != wanted or not _matches(sample.labels, rule):
            continue
        factor = 1.0
        if factors is not None:
            found = factors.get(frozenset(sample.labels.items()))
            if found is None:
                continue
            factor = found
        key = (
            signal,
            _model(table, sample.labels, default_model),
            sample.labels.get(table.gpu_label, "") if table.gpu_label else "",
            sample.labels.get(rule.reason, "") if rule.reason else "",
        )
        value = sample.value * rule.scale * factor
        reason = "non_finite" if not math.isfinite(value) else "negative" if value < 0 else ""
        if reason:
            if dropped is not None:
                dropped[reason] += 1
            if bad is not None:
                bad.add(key)
            continue
        if factors is not None:
            # A count times an average per count is a whole count: rounding undoes the
            # average's 6-digit print exactly (llama.cpp, below ~10^5 tokens).
            value = float(round(value))
        if agg == "max":
            values[key] = max(values.get(key, value), value)
        else:
            values[key] = values.get(key, 0.0) + value
        counts[key] = counts.get(key, 0) + 1


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
