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

from exporter.readings import ProfilingReading, ProfilingStatus
from exporter.snapshot import SourceResult
from exporter.sources.nvml_session import DeviceHandle, NvmlSession, SessionSource, error_reason
from exporter.sources.profiling.fields import WANTED_IDS, gpm_window
from exporter.sources.profiling.integrator import ProfilingIntegrator
from exporter.sources.profiling.select import ProfilingSelector

log = structlog.get_logger("gpm")

SOURCE = "gpm"


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
    gpu_poll = True

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
        self._last: dict[str, ProfilingStatus] = {}
        self.selector = selector  # auto mode: hands GPUs without GPM to DCGM/dcgm-exporter

    def use_integrator(self, integrator: ProfilingIntegrator) -> None:
        """Share counters with the other backends (auto mode hands GPUs between them)."""
        self._integrator = integrator

    def shutdown(self) -> None:
        for state in self._states.values():
            self._reset(state)  # samples belong to this NVML session: free them all
        self._states.clear()
        super().shutdown()

    def poll_session(self) -> SourceResult:
        statuses: dict[str, ProfilingStatus] = {}
        errors: dict[str, int] = {}
        for dh in self.session.devices:
            if dh.handle is None:
                continue
            status, reason = self._poll_device(dh)
            if status is not None:
                statuses[dh.device.gpu] = status
            if reason:
                errors[reason] = errors.get(reason, 0) + 1
        return SourceResult(source=SOURCE, reading=ProfilingReading(statuses), errors=errors)

    # per device -----------------------------------------------------------------------------
    def _poll_device(self, dh: DeviceHandle) -> tuple[ProfilingStatus | None, str]:
        """This GPU's status (None: another backend speaks for it) and an error reason.

        Any exception from one call costs this GPU's window, never the poll of the others:
        an NVML error keeps its reason, anything else (an older binding) is binding_error.
        """
        try:
            return self._poll_device_calls(dh)
        except Exception as exc:
            gpu = dh.device.gpu
            state = self._states.setdefault(gpu, _DeviceState())
            self._failed(gpu, state, "binding_error", exc)
            self._reset(state)
            return self._integrator.unavailable(gpu, SOURCE, "error"), "binding_error"

    def _poll_device_calls(self, dh: DeviceHandle) -> tuple[ProfilingStatus | None, str]:
        nvml = self.session.nvml
        gpu = dh.device.gpu
        state = self._states.setdefault(gpu, _DeviceState())
        if state.supported is None:
            state.supported, state.reason = self._probe(dh)
            log.debug("gpm_support", gpu=gpu, supported=state.supported, reason=state.reason)
            if self.selector is not None:
                self.selector.report(SOURCE, gpu, state.supported, state.reason)
        if not state.supported:
            if self.selector is not None and not self.selector.should_publish(SOURCE, gpu):
                return None, ""  # another source serves this GPU
            return self._integrator.unavailable(gpu, SOURCE, state.reason), ""
        try:
            new = self._sample(dh)
        except nvml.NVMLError as exc:
            reason = error_reason(nvml, exc)
            self._failed(gpu, state, reason, exc)
            self._reset(state)
            return self._integrator.unavailable(gpu, SOURCE, _profiling_reason(reason)), reason
        now = self.clock()
        old, old_at = state.sample, state.taken_at
        window = now - old_at
        if old is not None and window < self.min_window:
            nvml.nvmlGpmSampleFree(new)  # keep the older baseline; the window grows
            return self._last_or_pending(gpu), ""
        state.sample, state.taken_at = new, now
        if old is None or window > self.max_window:
            if old is not None:
                nvml.nvmlGpmSampleFree(old)
            return self._last_or_pending(gpu), ""
        try:
            values = self._metrics(gpu, state, old, new)
        except nvml.NVMLError as exc:
            reason = error_reason(nvml, exc)
            self._failed(gpu, state, reason, exc)
            return self._integrator.unavailable(gpu, SOURCE, _profiling_reason(reason)), reason
        finally:
            nvml.nvmlGpmSampleFree(old)
        if state.failed:
            log.info("gpm_sampling_ok", gpu=gpu)
            state.failed = ""
        status = self._integrator.window(gpu, SOURCE, gpm_window(window, values))
        self._last[gpu] = status
        return status, ""

    @staticmethod
    def _failed(gpu: str, state: _DeviceState, reason: str, exc: Exception) -> None:
        """Log a GPU's GPM sampling failing once per change of reason, not on every poll."""
        if state.failed != reason:
            log.warning("gpm_sampling_failed", gpu=gpu, reason=reason, error=str(exc))
            state.failed = reason

    def _last_or_pending(self, gpu: str) -> ProfilingStatus:
        """Between windows, repeat the last window (same sequence) so series do not flap."""
        last = self._last.get(gpu)
        return last if last is not None else self._integrator.pending(gpu, SOURCE)

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

    def _sample(self, dh: DeviceHandle) -> Any:
        """A fresh sample of this GPU. Freed again when taking it fails: a lost GPU fails on
        every poll, and each failure used to keep one NVML sample buffer for good."""
        nvml = self.session.nvml
        sample = nvml.nvmlGpmSampleAlloc()
        try:
            self._take(dh, sample)
        except BaseException:
            with contextlib.suppress(Exception):
                nvml.nvmlGpmSampleFree(sample)
            raise
        return sample

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


def _profiling_reason(nvml_reason: str) -> str:
    return {
        "gpu_lost": "gpu_lost",
        "not_supported": "unsupported",
        "function_not_found": "unsupported",
        "version_mismatch": "unsupported",
        "no_permission": "no_permission",
    }.get(nvml_reason, "error")
