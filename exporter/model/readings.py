"""Turns the latest snapshot into one :class:`~exporter.model.core.Window` per GPU.

Reads only the snapshot (no hardware, no network). Ratios come from the sources' gauges;
rates (tokens, FLOPs, energy) come from ``_total`` counters differenced between the
producing source's own polls, so they are exact whatever the model's cadence. Freshness is
judged on the model's own clock: the time since a counter (or a result) last moved.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from exporter.config import ModelConfig
from exporter.model.core import ModelRates, Window
from exporter.snapshot import Device, Labels, Sample, Snapshot

# Names owned by other areas (docs: notes/names.md); read, never declared here.
UTILIZATION = "goodput_gpu_utilization_ratio"
MEMORY_USED = "goodput_gpu_memory_used_bytes"
MEMORY_TOTAL = "goodput_gpu_memory_total_bytes"
POWER = "goodput_gpu_power_watts"
POWER_LIMIT = "goodput_gpu_power_limit_watts"
ENERGY = "goodput_gpu_energy_joules_total"
PROCESSES = "goodput_gpu_processes"
PROFILING_AVAILABLE = "goodput_gpu_profiling_available"
PROFILED_SECONDS = "goodput_gpu_profiled_seconds_total"
SM_ACTIVE = "goodput_gpu_sm_active_ratio"
SM_OCCUPANCY = "goodput_gpu_sm_occupancy_ratio"
TENSOR_ACTIVE = "goodput_gpu_tensor_active_ratio"
DRAM_ACTIVE = "goodput_gpu_dram_active_ratio"
GRAPHICS_ACTIVE = "goodput_gpu_graphics_active_ratio"
PIPE_ACTIVE = "goodput_gpu_pipe_active_ratio"
TOKENS = "goodput_gpu_tokens_total"
REQUESTS = "goodput_gpu_serving_requests"
FLOPS = "goodput_gpu_serving_flops_total"
FP_PIPES = frozenset({"fp64", "fp32", "fp16"})


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


class WindowBuilder:
    """Keeps the counter history needed to turn snapshots into windows, per GPU."""

    def __init__(self, cfg: ModelConfig, own_source: str = "model") -> None:
        self.cfg = cfg
        self.own_source = own_source
        self._counters: dict[tuple[str, str, Labels], _Counter] = {}
        self._seen: dict[tuple[str, str], _Seen] = {}
        self.bad_inputs: list[str] = []
        """``gpu/metric`` of non-finite inputs seen in the last :meth:`build`."""

    # counters ---------------------------------------------------------------------------------
    def _rate(self, gpu: str, sample: Sample, source_ts: float) -> float | None:
        """Per-second increase of a counter between its source's polls; the last rate is
        kept while the source has not polled again. A decrease is a reset (Prometheus rule)."""
        key = (gpu, sample.name, sample.labels)
        prev = self._counters.get(key)
        if prev is None:
            self._counters[key] = _Counter(sample.value, source_ts)
            return None
        if source_ts > prev.source_ts:
            increase = sample.value - prev.value
            if increase < 0:
                increase = sample.value
            prev.rate = increase / (source_ts - prev.source_ts)
            prev.value, prev.source_ts = sample.value, source_ts
        return prev.rate

    def _age(self, gpu: str, what: str, value: float, now: float) -> float:
        """Seconds since ``value`` last changed for (gpu, what), on the model's clock."""
        seen = self._seen.get((gpu, what))
        if seen is None or seen.value != value:
            self._seen[(gpu, what)] = _Seen(value, now)
            return 0.0
        return max(now - seen.changed_at, 0.0)

    # per GPU ----------------------------------------------------------------------------------
    def build(self, snap: Snapshot, device: Device, now: float, seconds: float) -> Window:
        gpu = device.gpu
        rows: list[tuple[Sample, float]] = []
        for name, result in snap.results.items():
            if name == self.own_source:
                continue
            for sample in result.device_samples(gpu):
                if math.isfinite(sample.value):
                    rows.append((sample, result.timestamp))
                else:
                    self.bad_inputs.append(f"{gpu}/{sample.name}")

        def gauge(name: str, match: Labels = ()) -> float | None:
            wanted = set(match)
            for s, _ in rows:
                if s.name == name and wanted.issubset(s.labels):
                    return s.value
            return None

        available, age = self._profiling(gpu, rows, now)
        pipes = [
            s.value
            for s, _ in rows
            if s.name == PIPE_ACTIVE and dict(s.labels).get("pipe") in FP_PIPES
        ]
        # NVML's power reading is already a 1 s average on Ampere and newer; the energy
        # counter is read less often than every poll (it is the costliest NVML call), so
        # differencing it per window would alternate between 0 and a burst.
        power = gauge(POWER)
        if power is None:
            for s, ts in rows:
                if s.name == ENERGY:
                    power = self._rate(gpu, s, ts)
        processes = gauge(PROCESSES)
        return Window(
            seconds=seconds,
            util=gauge(UTILIZATION),
            sm_active=gauge(SM_ACTIVE),
            sm_occupancy=gauge(SM_OCCUPANCY),
            tensor_active=gauge(TENSOR_ACTIVE),
            dram_active=gauge(DRAM_ACTIVE),
            fp_active=max(pipes) if pipes else None,
            graphics_active=gauge(GRAPHICS_ACTIVE),
            profiling_available=available,
            profiling_age_seconds=age,
            power_watts=power,
            power_limit_watts=gauge(POWER_LIMIT),
            memory_used_bytes=gauge(MEMORY_USED),
            memory_total_bytes=gauge(MEMORY_TOTAL),
            processes=None if processes is None else int(processes),
            serving=self._serving(gpu, rows, now),
            gpu_name=device.name,
            mig_profile=device.mig_profile,
        )

    def _profiling(
        self, gpu: str, rows: list[tuple[Sample, float]], now: float
    ) -> tuple[bool, float | None]:
        """(available on some source, seconds since its counters last moved)."""
        available = any(s.name == PROFILING_AVAILABLE and s.value >= 1 for s, _ in rows)
        if not available:
            return False, None
        profiled = [s.value for s, _ in rows if s.name == PROFILED_SECONDS]
        if profiled:
            return True, self._age(gpu, PROFILED_SECONDS, max(profiled), now)
        stamps = [ts for s, ts in rows if s.name == PROFILING_AVAILABLE and s.value >= 1]
        return True, self._age(gpu, "profiling_result", max(stamps), now)

    def _serving(
        self, gpu: str, rows: list[tuple[Sample, float]], now: float
    ) -> tuple[ModelRates, ...] | None:
        """Per served model rates, or None when nothing is attributed (or not yet a rate,
        or the serving source stopped updating)."""
        token_rows = [(s, ts) for s, ts in rows if s.name == TOKENS]
        if not token_rows:
            return None
        if (
            self._age(gpu, "serving_result", max(ts for _, ts in token_rows), now)
            > self.cfg.stale_after_seconds
        ):
            return None
        kinds = set(self.cfg.efficiency_token_kinds)
        tokens: dict[str, float] = defaultdict(float)
        eff: dict[str, float] = defaultdict(float)
        unrated = False
        for s, ts in token_rows:
            rate = self._rate(gpu, s, ts)
            lbl = dict(s.labels)
            model = lbl.get("model", "")
            if rate is None:
                unrated = True
                continue
            tokens[model] += rate
            if lbl.get("kind", "") in kinds:
                eff[model] += rate
        if unrated:
            return None
        flops: dict[str, float] = defaultdict(float)
        flops_models: set[str] = set()
        running: dict[str, float] = defaultdict(float)
        waiting: dict[str, float] = defaultdict(float)
        for s, ts in rows:
            lbl = dict(s.labels)
            model = lbl.get("model", "")
            if s.name == FLOPS:
                rate = self._rate(gpu, s, ts)
                if rate is not None:
                    flops[model] += rate
                    flops_models.add(model)
            elif s.name == REQUESTS:
                if lbl.get("state") == "running":
                    running[model] += s.value
                elif lbl.get("state") == "waiting":
                    waiting[model] += s.value
        return tuple(
            ModelRates(
                model=model,
                tokens_per_second=tokens[model],
                efficiency_tokens_per_second=eff[model],
                flops_per_second=flops[model] if model in flops_models else None,
                requests_running=running[model],
                requests_waiting=waiting[model],
            )
            for model in sorted(tokens)
        )
