"""ModelSource: runs the efficiency model on the latest snapshot and publishes its verdicts.

It is a Source like the others but reads nothing outside the process: each interval it takes
``store.current``, builds one window per GPU, runs that GPU's :class:`GpuModel` and publishes
the derived gauges. The work is a few arithmetic operations per GPU, so it runs on the event
loop without a thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from exporter.config import ModelConfig, Settings
from exporter.metrics.catalog import define
from exporter.model.core import (
    REGIMES,
    UNPRODUCTIVE_REASONS,
    GpuModel,
    Verdict,
)
from exporter.model.readings import WindowBuilder
from exporter.snapshot import Sample, SnapshotStore, SourceResult, labels
from exporter.sources.base import Source

log = structlog.get_logger("model")

SOURCE = "model"

REGIME = define(
    "goodput_gpu_regime",
    "gauge",
    "State set: 1 for the bottleneck regime the GPU is in (idle, allocated_idle, host_bound, "
    "launch_bound, memory_bound, compute_bound, unknown), 0 for the others. Debounced: a "
    "regime is entered after model.enter_windows windows and left after model.leave_windows.",
    labels=("regime",),
    source=SOURCE,
)
BUSY_UNPRODUCTIVE = define(
    "goodput_gpu_busy_unproductive",
    "gauge",
    "1 while the GPU looks busy but does little useful work, by reason: hollow_busy (kernel "
    "time high, SM active low) or busy_no_output (busy while the attributed engine makes "
    "almost no tokens). Always 0 while profiling is unusable.",
    labels=("reason",),
    source=SOURCE,
)
BUSY_UNPRODUCTIVE_SECONDS = define(
    "goodput_gpu_busy_unproductive_seconds_total",
    "counter",
    "Seconds spent busy but unproductive (either reason).",
    unit="seconds",
    source=SOURCE,
)
HOLLOW_UTILIZATION = define(
    "goodput_gpu_hollow_utilization_ratio",
    "gauge",
    "Kernel-time utilization not backed by SM activity: max(utilization - sm_active, 0).",
    unit="ratio",
    source=SOURCE,
)
EFFICIENCY_SCORE = define(
    "goodput_gpu_efficiency_score_ratio",
    "gauge",
    "0..1 efficiency score: weighted SM active, occupancy and the activity of the resource "
    "the regime says should be busy, scaled down when the attributed engine makes no tokens.",
    unit="ratio",
    source=SOURCE,
)
TOKENS_PER_SM_SECOND = define(
    "goodput_gpu_tokens_per_sm_second",
    "gauge",
    "Attributed (generated) tokens per second divided by the SM active ratio: tokens per "
    "second of fully active SMs.",
    source=SOURCE,
)
JOULES_PER_TOKEN = define(
    "goodput_gpu_joules_per_token",
    "gauge",
    "Board energy per attributed (generated) token over the last window.",
    unit="joules",
    source=SOURCE,
)
MFU = define(
    "goodput_gpu_mfu_ratio",
    "gauge",
    "Model FLOPs utilization: attributed tokens x FLOPs per token (or the engine's own FLOPs "
    "counter) divided by the GPU's peak dense FLOP/s for the model's dtype.",
    unit="ratio",
    source=SOURCE,
)
PROFILING_STALE = define(
    "goodput_gpu_profiling_stale",
    "gauge",
    "1 when profiling is said to be available but its counters stopped moving or read "
    "silent zeros (all ratios exactly 0 while kernels run and power is high).",
    source=SOURCE,
)


class ModelSource(Source):
    """Publishes the efficiency model's verdicts for every GPU in the snapshot."""

    name = SOURCE

    def __init__(
        self,
        store: SnapshotStore,
        cfg: ModelConfig,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.cfg = cfg
        self.interval = interval
        self.clock = clock
        self._builder = WindowBuilder(cfg, own_source=self.name)
        self._models: dict[str, GpuModel] = {}
        self._unproductive_seconds: dict[str, float] = {}
        self._last_now: float | None = None
        self._logged: dict[tuple[str, str], object] = {}

    async def poll(self) -> SourceResult:
        return self.evaluate()

    def evaluate(self) -> SourceResult:
        """One model pass over the current snapshot (synchronous; also used by tests)."""
        snap = self.store.current
        now = self.clock()
        seconds = 0.0 if self._last_now is None else max(now - self._last_now, 0.0)
        self._last_now = now
        self._builder.bad_inputs = []
        devices: dict[str, tuple[Sample, ...]] = {}
        errors: dict[str, int] = {}
        for device in snap.inventory:
            model = self._models.setdefault(device.gpu, GpuModel(self.cfg))
            window = self._builder.build(snap, device, now, seconds or self.interval)
            verdict = model.evaluate(window)
            devices[device.gpu] = tuple(self._samples(device.gpu, verdict, seconds))
            if verdict.window.mfu_above_peak:
                errors["mfu_above_peak"] = errors.get("mfu_above_peak", 0) + 1
            self._log_changes(device.gpu, verdict)
        if self._builder.bad_inputs:
            errors["non_finite_input"] = len(self._builder.bad_inputs)
            inputs = ",".join(sorted(set(self._builder.bad_inputs)))
            if self._changed("", "bad_inputs", inputs, ""):
                log.warning("model_input_not_finite", inputs=inputs)
        else:
            self._logged[("", "bad_inputs")] = ""
        return SourceResult(source=SOURCE, devices=devices, errors=errors)

    def _samples(self, gpu: str, v: Verdict, seconds: float) -> list[Sample]:
        out = [Sample(REGIME, 1.0 if r == v.regime else 0.0, labels(regime=r)) for r in REGIMES]
        flags = {"hollow_busy": v.hollow_busy, "busy_no_output": v.busy_no_output}
        out += [
            Sample(BUSY_UNPRODUCTIVE, float(flags[r]), labels(reason=r))
            for r in UNPRODUCTIVE_REASONS
        ]
        total = self._unproductive_seconds.get(gpu, 0.0)
        if v.busy_unproductive:
            total += seconds
        self._unproductive_seconds[gpu] = total
        out.append(Sample(BUSY_UNPRODUCTIVE_SECONDS, total))
        out.append(Sample(PROFILING_STALE, 1.0 if v.window.profiling_stale else 0.0))
        a = v.window
        for name, value in (
            (HOLLOW_UTILIZATION, a.hollow_utilization),
            (EFFICIENCY_SCORE, a.efficiency_score),
            (TOKENS_PER_SM_SECOND, a.tokens_per_sm_second),
            (JOULES_PER_TOKEN, a.joules_per_token),
            (MFU, a.mfu),
        ):
            if value is not None:
                out.append(Sample(name, value))
        return out

    def _log_changes(self, gpu: str, v: Verdict) -> None:
        """One log line per change of regime, flag, profiling health or MFU sanity."""
        health = (
            "silent_zeros"
            if v.window.silent_zeros
            else ("stale" if v.window.profiling_stale else "ok")
        )
        if self._changed(gpu, "regime", v.regime, None):
            log.info("regime_changed", gpu=gpu, regime=v.regime)
        flags = (v.hollow_busy, v.busy_no_output)
        if self._changed(gpu, "flags", flags, (False, False)):
            log.info(
                "busy_unproductive_changed", gpu=gpu, hollow_busy=flags[0], busy_no_output=flags[1]
            )
        if self._changed(gpu, "health", health, "ok"):
            (log.warning if health != "ok" else log.info)(
                "profiling_health_changed", gpu=gpu, state=health
            )
        if self._changed(gpu, "mfu", v.window.mfu_above_peak, False) and v.window.mfu_above_peak:
            log.warning(
                "mfu_above_peak",
                gpu=gpu,
                hint="check model.model_parameters, dtype and per-GPU token split",
            )

    def _changed(self, gpu: str, what: str, state: object, initial: object) -> bool:
        previous = self._logged.get((gpu, what), initial)
        self._logged[(gpu, what)] = state
        return previous != state


def build_sources(settings: Settings, store: SnapshotStore) -> list[Source]:
    """The model's sources for the daemon: one ModelSource on the model interval."""
    interval = settings.model.interval or settings.interval
    return [ModelSource(store, settings.model, interval=interval)]
