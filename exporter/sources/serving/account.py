"""Accounting: one attributed reading of a target into the published per-GPU totals and
this round's gauges.

Every value passes the target's :class:`~exporter.sources.serving.accumulate.Ledger`
first (model cap, series cap, physical ceiling, restarts); counters then become sums of
accepted deltas per (gpu, model, engine) row, split or replicated across the engine's
GPUs as exporter/sources/serving/signals.py declares, and gauges are collected per row
for this round. :meth:`Accounts.served` turns both into the typed
:class:`~exporter.readings.ServedModel` rows the source publishes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import structlog

from exporter.readings import Device, ServedModel
from exporter.sources.serving.accumulate import ModelKey, Published, Step
from exporter.sources.serving.adapter import Reading, SignalKey
from exporter.sources.serving.attribution import Attribution, to_gpu_labels
from exporter.sources.serving.signals import FIELDS, SIGNALS, TOKENS, Signal
from exporter.sources.serving.state import TargetState

log = structlog.get_logger("serving")

DERIVED_JITTER = 1e-3
"""A derived counter (a product or difference of printed counters) may dip this share of
its value from rounding (llama.cpp prints 6 significant digits) without being a restart."""

NODE_LEVEL = ("",)
"""The gpu key of signals no rule attributes: rendered without a gpu label."""

Gauges = dict[ModelKey, dict[str, list[float]]]
"""Per published row, each gauge signal's values this round (one per target feeding it)."""
GpusOf = dict[SignalKey, tuple[str, ...]]
"""The GPU labels (or :data:`NODE_LEVEL`) each series of a reading is attributed to."""


class Accounts:
    """The published per-row totals and how readings feed them."""

    def __init__(self) -> None:
        self.published = Published()
        """Per (gpu, model, engine) row: sums of accepted deltas, and the targets feeding it."""

    def account(
        self,
        state: TargetState,
        reading: Reading,
        default_model: str,
        attribution: Attribution,
        inventory: Sequence[Device],
        gauges: Gauges,
        now: float,
    ) -> None:
        """Feed one reading's accepted counter deltas into the published totals and its
        gauges into ``gauges``; everything passes the target's ledger first. Series that
        name no model go to ``default_model``."""
        reading = state.settler.apply(reading)
        state.ledger.count(reading.dropped)
        values = state.ledger.relabel(reading.values, default_model, now)
        gpus_of = _place(state, reading, values, attribution, inventory)
        step = _step(state, reading, values, gpus_of, now)
        for key, value in values.items():
            spec = SIGNALS[key[0]]
            rows = [(gpu, key[1], reading.engine) for gpu in gpus_of[key]]
            if spec.kind == "counter":
                delta = _net(key, step.deltas, reading.minus)
                share = delta / len(rows) if spec.split == "split" else delta
                for row in rows:
                    self.published.add(row, spec.name, share, state.target.key, now)
            else:
                for row in rows:
                    self.published.touch(row, state.target.key, now)
                    gauges.setdefault(row, {}).setdefault(spec.name, []).append(value)
        _log_caps(state)

    def served(self, gauges: Gauges) -> dict[str, tuple[ServedModel, ...]]:
        """One ServedModel per (gpu, model, engine) with totals or live gauges."""
        out: dict[str, list[ServedModel]] = {}
        rows = self.published.rows()
        for key in sorted(set(rows) | set(gauges)):
            gpu, model, engine = key
            out.setdefault(gpu, []).append(
                _served_model(model, engine, rows.get(key, {}), gauges.get(key, {}))
            )
        return {gpu: tuple(models) for gpu, models in out.items()}


def _place(
    state: TargetState,
    reading: Reading,
    values: Mapping[SignalKey, float],
    attribution: Attribution,
    inventory: Sequence[Device],
) -> GpusOf:
    """The GPUs each relabelled series goes to; records the target's admitted models."""
    model_gpus = {
        name: uuids
        for model, uuids in reading.model_gpus.items()
        if (name := model[: state.ledger.limits.max_label_length]) in state.ledger.models
    }
    state.models = tuple(sorted({key[1] for key in values} | set(model_gpus)))
    return {
        key: _gpus_for(key, model_gpus, attribution, inventory) or NODE_LEVEL
        for key in values
    }


def _step(
    state: TargetState,
    reading: Reading,
    values: Mapping[SignalKey, float],
    gpus_of: GpusOf,
    now: float,
) -> Step:
    """The ledger's accepted deltas of every counter, attributed or not (so attribution
    arriving later does not dump the engine's whole history onto a GPU in one step)."""
    step = state.ledger.step(
        values,
        counters=(s for s in {k[0] for k in values} if SIGNALS[s].kind == "counter"),
        now=now,
        gpus=lambda key: len(gpus_of[key]),
        rises=reading.rises,
        jitter=dict.fromkeys(reading.derived, DERIVED_JITTER),
        started=reading.started,
    )
    target = state.target
    if step.restarted and reading.started:
        log.info("serving_target_restarted", target=target.name, engine=reading.engine)
    state.flapped = state.flapped or step.flapped
    state.once(  # once per target: a flapping engine would otherwise log every scrape
        "flapping",
        state.flapped,
        False,
        event="serving_start_time_changed_without_restart",
        level="warning",
        target=target.name,
        effect="counters did not go down: nothing was counted again",
    )
    return step


def _log_caps(state: TargetState) -> None:
    """One line when a target first hits the model cap or an implausible value."""
    dropped = state.ledger.dropped
    state.once(
        "models",
        dropped["max_models"] > 0,
        False,
        event="serving_target_over_model_cap",
        level="warning",
        target=state.target.name,
        max_models_per_target=state.ledger.limits.max_models,
        effect="values of further model names are dropped (max_models)",
    )
    state.once(
        "implausible",
        dropped["implausible"] > 0,
        False,
        event="serving_counter_implausible",
        level="warning",
        target=state.target.name,
        max_tokens_per_second_per_gpu=state.ledger.limits.tokens_per_second,
        effect="growth above the ceiling is dropped (implausible)",
    )


def _gpus_for(
    key: SignalKey,
    model_gpus: Mapping[str, frozenset[str]],
    attribution: Attribution,
    inventory: Sequence[Device],
) -> tuple[str, ...]:
    """The series' own GPU label (Triton) or its model's, unless config pinned GPUs; for a
    discovered pod only among the GPUs the kubelet assigned it."""
    if attribution.via != "explicit":
        _, model, uuid = key
        found: tuple[str, ...] | None = None
        if uuid:
            found = to_gpu_labels([uuid], inventory)
        elif model in model_gpus:
            found = to_gpu_labels(sorted(model_gpus[model]), inventory)
        if found is not None and (attribution.allowed is None or set(found) <= attribution.allowed):
            return found
    return attribution.gpus


def _net(
    key: SignalKey, deltas: Mapping[SignalKey, float], minus: Mapping[str, str]
) -> float:
    """A counter series' accepted growth, less the growth of the signal its rule names in
    ``minus`` (same model and GPU), never below 0."""
    delta = deltas.get(key, 0.0)
    other = minus.get(key[0])
    if other is not None:
        delta = max(delta - deltas.get((other, *key[1:]), 0.0), 0.0)
    return delta


def _served_model(
    model: str, engine: str, totals: Mapping[str, float], gauges: Mapping[str, list[float]]
) -> ServedModel:
    """One row's counter totals and gauges as the typed reading, field by field as
    exporter/sources/serving/signals.py declares them."""
    tokens = tuple(sorted((s.token_kind, totals[s.name]) for s in TOKENS if s.name in totals))
    fields: dict[str, Any] = {s.served_as: _value(s, totals, gauges) for s in FIELDS}
    return replace(ServedModel(model=model, engine=engine, tokens=tokens), **fields)


def _value(
    spec: Signal, totals: Mapping[str, float], gauges: Mapping[str, list[float]]
) -> float | None:
    """A counter's total, or the gauge of every engine on the GPU merged (several engines
    on one GPU: requests add up, KV takes the fullest)."""
    if spec.kind == "counter":
        return totals.get(spec.name)
    values = gauges.get(spec.name)
    if not values:
        return None
    return max(values) if spec.merge == "max" else sum(values)
