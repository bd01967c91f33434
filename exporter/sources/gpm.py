"""GPM source: profiling counters through NVML GPM (Hopper and newer).

Every poll takes one GPM sample per device and computes all wanted metrics between it and
the previous sample in one ``nvmlGpmMetricsGet``. Windows shorter than ``min_window`` are not
computed (GPM counters refresh in coarse steps and read 0/NaN below ~100 ms); windows longer
than ``max_window`` are discarded and the baseline reseeded. Each metric's own ``nvmlReturn``
is checked and unsupported ids are dropped after the first try.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from exporter.snapshot import Sample, SourceResult
from exporter.sources.nvml_session import DeviceHandle, NvmlSession, SessionSource, error_reason
from exporter.sources.profiling_metrics import (
    ProfilingIntegrator,
    ProfilingWindow,
    unavailable,
)
from exporter.sources.profiling_select import ProfilingSelector

log = structlog.get_logger("gpm")

SOURCE = "gpm"
MIB = 1024.0 * 1024.0

# GPM metric ids (NVML_GPM_METRIC_*), stable across bindings versions; addressed by number so
# older nvidia-ml-py releases that lack a constant still work.
PERCENT_IDS: dict[int, tuple[str, str]] = {
    1: ("graphics_active", ""),
    2: ("sm_active", ""),
    3: ("sm_occupancy", ""),
    4: ("pipes", "integer"),
    5: ("tensor_active", ""),
    6: ("tensor_pipes", "dfma"),
    7: ("tensor_pipes", "hmma"),
    8: ("tensor_pipes", "dmma"),
    9: ("tensor_pipes", "imma"),
    10: ("dram_active", ""),
    11: ("pipes", "fp64"),
    12: ("pipes", "fp32"),
    13: ("pipes", "fp16"),
}
BANDWIDTH_IDS: dict[int, tuple[str, str]] = {
    20: ("pcie_bytes_per_second", "tx"),
    21: ("pcie_bytes_per_second", "rx"),
    60: ("nvlink_bytes_per_second", "rx"),
    61: ("nvlink_bytes_per_second", "tx"),
}
WANTED_IDS = (*PERCENT_IDS, *BANDWIDTH_IDS)


@dataclass
class _DeviceState:
    supported: bool | None = None
    reason: str = ""
    sample: Any = None
    taken_at: float = 0.0
    ids: list[int] = field(default_factory=lambda: list(WANTED_IDS))
    failed: str = ""  # the NVML reason of the last failed sample, "" while sampling works


class GpmSource(SessionSource):
    name = SOURCE

    def __init__(
        self,
        session: NvmlSession,
        interval: float = 1.0,
        min_window: float = 0.5,
        max_window: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        selector: ProfilingSelector | None = None,
    ) -> None:
        super().__init__(session, interval)
        self.min_window = min_window
        self.max_window = max_window
        self.clock = clock
        self._states: dict[str, _DeviceState] = {}
        self._integrator = ProfilingIntegrator()
        self._last: dict[str, list[Sample]] = {}
        self.selector = selector  # auto mode: hands GPUs without GPM to DCGM/dcgm-exporter

    def shutdown(self) -> None:
        for state in self._states.values():
            self._reset(state)  # samples belong to this NVML session: free them all
        self._states.clear()
        super().shutdown()

    def read(self) -> SourceResult:
        devices: dict[str, tuple[Sample, ...]] = {}
        errors: dict[str, int] = {}
        for dh in self.session.devices:
            if dh.handle is None:
                continue
            samples, reason = self._poll_device(dh)
            devices[dh.device.gpu] = tuple(samples)
            if reason:
                errors[reason] = errors.get(reason, 0) + 1
        return SourceResult(source=SOURCE, devices=devices, errors=errors)

    # per device -----------------------------------------------------------------------------
    def _poll_device(self, dh: DeviceHandle) -> tuple[list[Sample], str]:
        nvml = self.session.nvml
        gpu = dh.device.gpu
        state = self._states.setdefault(gpu, _DeviceState())
        if state.supported is None:
            state.supported, state.reason = self._probe(dh)
            log.info("gpm_support", gpu=gpu, supported=state.supported, reason=state.reason)
            if self.selector is not None:
                self.selector.report(SOURCE, gpu, state.supported, state.reason)
        if not state.supported:
            if self.selector is not None and not self.selector.should_publish(SOURCE, gpu):
                return [], ""  # another source serves this GPU
            return [unavailable(SOURCE, state.reason)], ""
        try:
            new = nvml.nvmlGpmSampleAlloc()
            self._take(dh, new)
        except nvml.NVMLError as exc:
            reason = error_reason(nvml, exc)
            self._failed(gpu, state, reason, exc)
            self._reset(state)
            return [
                unavailable(SOURCE, _profiling_reason(reason)),
                *self._integrator.totals_only(gpu),
            ], reason
        now = self.clock()
        old, old_at = state.sample, state.taken_at
        window = now - old_at
        if old is not None and window < self.min_window:
            nvml.nvmlGpmSampleFree(new)  # keep the older baseline; the window grows
            return self._last_or_totals(gpu), ""
        state.sample, state.taken_at = new, now
        if old is None or window > self.max_window:
            if old is not None:
                nvml.nvmlGpmSampleFree(old)
            return self._last_or_totals(gpu), ""
        try:
            values = self._metrics(gpu, state, old, new)
        except nvml.NVMLError as exc:
            reason = error_reason(nvml, exc)
            self._failed(gpu, state, reason, exc)
            return [
                unavailable(SOURCE, _profiling_reason(reason)),
                *self._integrator.totals_only(gpu),
            ], reason
        finally:
            nvml.nvmlGpmSampleFree(old)
        if state.failed:
            log.info("gpm_sampling_ok", gpu=gpu)
            state.failed = ""
        out = self._integrator.samples(gpu, _window(window, values), SOURCE)
        self._last[gpu] = out
        return out, ""

    @staticmethod
    def _failed(gpu: str, state: _DeviceState, reason: str, exc: Exception) -> None:
        """Log a GPU's GPM sampling failing once per change of reason, not on every poll."""
        if state.failed != reason:
            log.warning("gpm_sampling_failed", gpu=gpu, reason=reason, error=str(exc))
            state.failed = reason

    def _last_or_totals(self, gpu: str) -> list[Sample]:
        """Between windows, repeat the last window's values so series do not flap."""
        last = self._last.get(gpu)
        return list(last) if last else self._integrator.totals_only(gpu)

    def _probe(self, dh: DeviceHandle) -> tuple[bool, str]:
        nvml = self.session.nvml
        probe_handle = dh.parent_handle if dh.device.is_mig else dh.handle
        try:
            support = nvml.nvmlGpmQueryDeviceSupport(probe_handle)
        except nvml.NVMLError as exc:
            return False, _profiling_reason(error_reason(nvml, exc))
        except AttributeError:
            return False, "unsupported"  # bindings older than GPM
        if not support.isSupportedDevice:
            return False, "unsupported"
        return True, ""

    def _take(self, dh: DeviceHandle, sample: Any) -> None:
        nvml = self.session.nvml
        if dh.device.is_mig:
            nvml.nvmlGpmMigSampleGet(dh.parent_handle, dh.gpu_instance_id, sample)
        else:
            nvml.nvmlGpmSampleGet(dh.handle, sample)

    def _metrics(self, gpu: str, state: _DeviceState, old: Any, new: Any) -> dict[int, float]:
        nvml = self.session.nvml
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(state.ids)
        request.sample1 = old
        request.sample2 = new
        for i, metric_id in enumerate(state.ids):
            request.metrics[i].metricId = metric_id
        nvml.nvmlGpmMetricsGet(request)
        values: dict[int, float] = {}
        dropped: list[int] = []
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            if metric.nvmlReturn != nvml.NVML_SUCCESS:
                dropped.append(int(metric.metricId))
                continue
            values[int(metric.metricId)] = float(metric.value)
        if dropped:
            state.ids = [m for m in state.ids if m not in dropped]
            log.info("gpm_metrics_unsupported", gpu=gpu, metric_ids=dropped)
        return values

    def _reset(self, state: _DeviceState) -> None:
        if state.sample is not None:
            with contextlib.suppress(Exception):
                self.session.nvml.nvmlGpmSampleFree(state.sample)
        state.sample = None


def _window(seconds: float, values: dict[int, float]) -> ProfilingWindow:
    scalars: dict[str, float] = {}
    groups: dict[str, list[tuple[str, float]]] = {
        "tensor_pipes": [],
        "pipes": [],
        "pcie_bytes_per_second": [],
        "nvlink_bytes_per_second": [],
    }
    for metric_id, value in values.items():
        if metric_id in PERCENT_IDS:
            attr, label = PERCENT_IDS[metric_id]
            ratio = value / 100.0
        else:
            attr, label = BANDWIDTH_IDS[metric_id]
            ratio = value * MIB
        if ratio != ratio:  # NaN: nothing moved in this window
            ratio = 0.0
        if label:
            groups[attr].append((label, ratio))
        else:
            scalars[attr] = ratio
    kwargs: dict[str, Any] = {k: tuple(sorted(v)) for k, v in groups.items()}
    kwargs.update(scalars)
    return ProfilingWindow(seconds=seconds, **kwargs)


def _profiling_reason(nvml_reason: str) -> str:
    return {
        "not_supported": "unsupported",
        "function_not_found": "unsupported",
        "version_mismatch": "unsupported",
        "no_permission": "no_permission",
    }.get(nvml_reason, "error")
