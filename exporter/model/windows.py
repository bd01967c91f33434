"""Turns a snapshot's typed readings into one :class:`~exporter.model.core.Window` per GPU.

Reads only the snapshot's typed fields (no metric names, no hardware, no network). Ratios come
from the selected profiling backend's window; rates (tokens, FLOPs) come from cumulative
counters differenced between the producing source's own polls, so they are exact whatever
the model's cadence. Freshness is judged on the model's own clock: the time since a counter
(or a result) last moved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exporter.model.config import ModelConfig
from exporter.model.core import ModelRates, Window
from exporter.readings import (
    CollectiveReading,
    Device,
    GpuState,
    ProfilingStatus,
    ProfilingWindow,
    ServedModel,
    ServingState,
)
from exporter.snapshot import Snapshot
from exporter.sources.serving.signals import FLOPS, NO_FORWARD_PASS, TOKENS
from exporter.util import finite as _finite

FP_PIPES = ("fp64", "fp32", "fp16")
TOKEN_SIGNAL = {s.token_kind: s.name for s in TOKENS}
"""Token kind -> its serving signal's name, the key its counter history is kept under."""


@dataclass
class _Counter:
    value: float
    source_ts: float
    rate: float | None = None


@dataclass
class _Seen:
    """When (on the model's clock) a tracked value last changed."""

    value: float
    changed_at: float


def _link_use(device: Device, window: ProfilingWindow | None) -> tuple[tuple[str, float], ...]:
    """(link, busier direction's rate / the link's usable peak) where both are known."""
    if window is None:
        return ()
    out = []
    for link, peak in device.link_peaks:
        rates = [v for _, v in (window.link_rates(link)) if math.isfinite(v)]
        if rates and peak > 0:
            out.append((link, max(max(rates), 0.0) / peak))
    return tuple(out)


def _bus_rates(window: ProfilingWindow | None) -> tuple[tuple[str, str, float], ...]:
    """(link, direction, bytes/s) of every finite link rate in the profiling window."""
    if window is None:
        return ()
    return tuple(
        (link, direction, rate)
        for link in ("pcie", "nvlink")
        for direction, rate in window.link_rates(link)
        if math.isfinite(rate)
    )


class WindowBuilder:
    """Keeps the counter history needed to turn snapshots into windows, per GPU."""

    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        self._counters: dict[tuple[str, str, str, str], _Counter] = {}
        self._seen: dict[tuple[str, str], _Seen] = {}
        self.bad_inputs: list[str] = []
        """``gpu/field`` of non-finite inputs seen in the last :meth:`build`."""

    # counters ---------------------------------------------------------------------------------
    def _rate(self, key: tuple[str, str, str, str], value: float, source_ts: float) -> float | None:
        """Per-second increase of a counter between its source's polls; the last rate is
        kept while the source has not polled again. A decrease is a reset (Prometheus rule)."""
        prev = self._counters.get(key)
        if prev is None:
            self._counters[key] = _Counter(value, source_ts)
            return None
        if source_ts > prev.source_ts:
            increase = value - prev.value
            if increase < 0:
                increase = value
            prev.rate = increase / (source_ts - prev.source_ts)
            prev.value, prev.source_ts = value, source_ts
        return prev.rate

    def _age(self, gpu: str, what: str, value: float, now: float) -> float:
        """Seconds since ``value`` last changed for (gpu, what), on the model's clock."""
        seen = self._seen.get((gpu, what))
        if seen is None or seen.value != value:
            self._seen[(gpu, what)] = _Seen(value, now)
            return 0.0
        return max(now - seen.changed_at, 0.0)

    def _check(self, gpu: str, name: str, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            self.bad_inputs.append(f"{gpu}/{name}")
            return None
        return value

    # per GPU ----------------------------------------------------------------------------------
    def build(self, snap: Snapshot, device: Device, now: float, seconds: float) -> Window:
        gpu = device.gpu
        state = snap.gpu_states.get(gpu) or GpuState(up=False)
        status = snap.profiling(gpu)
        window = status.window if status is not None and status.available else None
        c = self._check

        def ratio(name: str, value: float | None) -> float | None:
            return c(gpu, name, value)

        pipes = [v for p, v in (window.pipes if window else ()) if p in FP_PIPES]
        available, age = self._profiling(gpu, status, now)
        return Window(
            seconds=seconds,
            util=ratio("utilization", state.utilization),
            sm_active=ratio("sm_active", window.sm_active if window else None),
            sm_occupancy=ratio("sm_occupancy", window.sm_occupancy if window else None),
            tensor_active=ratio("tensor_active", window.tensor_active if window else None),
            dram_active=ratio("dram_active", window.dram_active if window else None),
            fp_active=ratio("fp_active", max(pipes)) if pipes else None,
            graphics_active=ratio("graphics_active", window.graphics_active if window else None),
            profiling_available=available,
            profiling_age_seconds=age,
            # NVML's power reading is already a 1 s average on Ampere and newer; the energy
            # counter is read less often than every poll (it is the costliest NVML call).
            power_watts=c(gpu, "power", state.power_watts),
            power_limit_watts=c(gpu, "power_limit", state.power_limit_watts),
            memory_used_bytes=c(gpu, "memory_used", state.memory_used_bytes),
            memory_total_bytes=c(gpu, "memory_total", state.memory_total_bytes),
            processes=state.process_count,
            serving=self._serving(gpu, snap, now),
            nvlink_bytes_per_second=(
                sum(max(v, 0.0) for _, v in window.nvlink_bytes_per_second)
                if window and window.nvlink_bytes_per_second
                else None
            ),
            link_use=_link_use(device, window),
            bus_bytes_per_second=_bus_rates(window),
            collectives_per_second=c(gpu, "collectives", self._collectives(gpu, snap, now)),
            gpu_name=device.name,
            mig_profile=device.mig_profile,
        )

    def _collectives(self, gpu: str, snap: Snapshot, now: float) -> float | None:
        """NCCL's launch rate for ``gpu`` while the NCCL source keeps answering; None
        where it does not tell (no RAS, no communicator here seen twice, gone stale)."""
        reading = snap.get(CollectiveReading)
        stamp = snap.stamp(CollectiveReading)
        state = reading.gpus.get(gpu) if reading is not None else None
        if state is None or stamp is None:
            return None
        if self._age(gpu, "collectives_result", stamp, now) > self.cfg.stale_after_seconds:
            return None
        return state.per_second

    def _profiling(
        self, gpu: str, status: ProfilingStatus | None, now: float
    ) -> tuple[bool, float | None]:
        """(available on some backend, seconds since its window last moved)."""
        if status is None or not status.available:
            return False, None
        return True, self._age(gpu, "profiling_window", float(status.sequence), now)

    def _serving(self, gpu: str, snap: Snapshot, now: float) -> tuple[ModelRates, ...] | None:
        """Per served model rates, or None when nothing is attributed (or not yet a rate,
        or the serving source stopped updating)."""
        serving = snap.get(ServingState)
        models = serving.gpus.get(gpu) if serving is not None else None
        self._forget_models(gpu, {(m.model, m.engine) for m in models or ()})
        stamp = snap.stamp(ServingState)
        if not models or stamp is None:
            return None
        if self._age(gpu, "serving_result", stamp, now) > self.cfg.stale_after_seconds:
            return None
        kinds = frozenset(self.cfg.efficiency_token_kinds)
        out: list[ModelRates] = []
        for m in sorted(models, key=lambda m: (m.model, m.engine)):
            rates = self._model_rates(gpu, m, stamp, kinds)
            if rates is None:
                return None
            out.append(rates)
        return tuple(out)

    def _forget_models(self, gpu: str, current: set[tuple[str, str]]) -> None:
        """Drop the counter history of models no longer served on ``gpu`` (the serving
        source dropped their series), so model-name churn cannot grow this table."""
        gone = [k for k in self._counters if k[0] == gpu and (k[1], k[2]) not in current]
        for key in gone:
            del self._counters[key]

    def _model_rates(
        self, gpu: str, m: ServedModel, stamp: float, kinds: frozenset[str]
    ) -> ModelRates | None:
        tokens = eff = 0.0
        for kind, total in m.tokens:
            name = TOKEN_SIGNAL.get(kind, kind)
            if self._check(gpu, name, total) is None:
                continue
            rate = self._rate((gpu, m.model, m.engine, name), total, stamp)
            if rate is None:
                return None
            if kind not in NO_FORWARD_PASS:
                tokens += rate
            if kind in kinds:
                eff += rate
        flops = None
        if m.flops is not None and self._check(gpu, FLOPS.name, m.flops) is not None:
            flops = self._rate((gpu, m.model, m.engine, FLOPS.name), m.flops, stamp)
        return ModelRates(
            model=m.model,
            tokens_per_second=tokens,
            efficiency_tokens_per_second=eff,
            flops_per_second=flops,
            requests_running=_finite(m.requests_running) or 0.0,
            requests_waiting=_finite(m.requests_waiting) or 0.0,
        )
