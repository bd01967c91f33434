"""NVML source: identity, health, kernel-time utilization, memory, power, energy, clocks,
throttling, ECC, row remapping and compute processes of every GPU and MIG instance.

Each reading is one small function. A reading that raises NOT_SUPPORTED is dropped for that
device after the first try (said once in the log); GPU_IS_LOST marks the device lost; any
other error marks it down with the reason, and the other devices go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

from exporter.metrics.catalog import define
from exporter.snapshot import ProcessInfo, Sample, SourceResult, labels
from exporter.sources.nvml_session import DeviceHandle, NvmlSession, SessionSource, error_reason

log = structlog.get_logger("nvml")

SOURCE = "nvml"

GPU_INFO = define(
    "goodput_gpu_info",
    "gauge",
    "Constant 1 per GPU or MIG instance; labels carry its identity.",
    labels=(
        "name",
        "pci_bus_id",
        "driver_version",
        "mig_parent_uuid",
        "gpu_instance_id",
        "compute_instance_id",
        "mig_profile",
    ),
    source=SOURCE,
)
GPU_UP = define(
    "goodput_gpu_up",
    "gauge",
    "1 if the last NVML poll of this device succeeded; 0 with `reason` (gpu_lost, "
    "no_permission, discovery_failed, error, ...) if not.",
    labels=("reason",),
    source=SOURCE,
)
UTILIZATION = define(
    "goodput_gpu_utilization_ratio",
    "gauge",
    "Share of the last sample period in which any kernel ran (what nvidia-smi calls "
    "utilization). Says nothing about how many SMs did work.",
    unit="ratio",
    source=SOURCE,
)
UTILIZATION_SECONDS = define(
    "goodput_gpu_utilization_seconds_total",
    "counter",
    "Kernel-time utilization integrated over polls (ratio x seconds between polls).",
    unit="seconds",
    source=SOURCE,
)
MEMORY_UTILIZATION = define(
    "goodput_gpu_memory_controller_utilization_ratio",
    "gauge",
    "Share of the last sample period device memory was read or written (NVML).",
    unit="ratio",
    source=SOURCE,
)
MEMORY_USED = define(
    "goodput_gpu_memory_used_bytes", "gauge", "Device memory in use.", unit="bytes", source=SOURCE
)
MEMORY_TOTAL = define(
    "goodput_gpu_memory_total_bytes",
    "gauge",
    "Device memory in total.",
    unit="bytes",
    source=SOURCE,
)
POWER = define(
    "goodput_gpu_power_watts",
    "gauge",
    "Board power draw (NVML power usage).",
    unit="watts",
    source=SOURCE,
)
POWER_LIMIT = define(
    "goodput_gpu_power_limit_watts",
    "gauge",
    "Enforced board power limit.",
    unit="watts",
    source=SOURCE,
)
ENERGY = define(
    "goodput_gpu_energy_joules_total",
    "counter",
    "Energy consumed since the driver loaded; rate() gives watts.",
    unit="joules",
    source=SOURCE,
)
TEMPERATURE = define(
    "goodput_gpu_temperature_celsius",
    "gauge",
    "GPU die temperature.",
    unit="celsius",
    source=SOURCE,
)
CLOCK = define(
    "goodput_gpu_clock_hertz",
    "gauge",
    "Current clock by domain (sm, memory).",
    unit="hertz",
    labels=("domain",),
    source=SOURCE,
)
CLOCK_MAX = define(
    "goodput_gpu_clock_max_hertz",
    "gauge",
    "Maximum clock by domain (sm, memory).",
    unit="hertz",
    labels=("domain",),
    source=SOURCE,
)
CLOCK_EVENT_ACTIVE = define(
    "goodput_gpu_clock_event_active",
    "gauge",
    "1 while a clock-event (throttle) reason holds the clocks down.",
    labels=("reason",),
    source=SOURCE,
)
CLOCK_EVENT_SECONDS = define(
    "goodput_gpu_clock_event_seconds_total",
    "counter",
    "Time the clocks were held down, by reason, as counted by the driver.",
    unit="seconds",
    labels=("reason",),
    source=SOURCE,
)
ECC_ERRORS = define(
    "goodput_gpu_ecc_errors_total",
    "counter",
    "ECC errors since the driver loaded (volatile), by type (corrected, uncorrected).",
    labels=("type",),
    source=SOURCE,
)
REMAPPED_ROWS = define(
    "goodput_gpu_remapped_rows_total",
    "counter",
    "Memory rows remapped, by cause (correctable, uncorrectable).",
    labels=("cause",),
    source=SOURCE,
)
ROW_REMAP_PENDING = define(
    "goodput_gpu_row_remap_pending",
    "gauge",
    "1 if a row remap is pending (takes effect at the next GPU reset).",
    source=SOURCE,
)
ROW_REMAP_FAILURE = define(
    "goodput_gpu_row_remap_failure",
    "gauge",
    "1 if a row remap failed: the GPU needs service.",
    source=SOURCE,
)
PROCESSES = define(
    "goodput_gpu_processes",
    "gauge",
    "Compute processes running on the device.",
    source=SOURCE,
)

# Clock-event reason bits (nvmlClocksEventReason*) and the matching cumulative field ids.
CLOCK_EVENT_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}
CLOCK_EVENT_FIELDS: dict[str, int] = {
    "sw_power_cap": 74,
    "sync_boost": 76,
    "sw_thermal_slowdown": 269,
    "hw_thermal_slowdown": 270,
    "hw_power_brake_slowdown": 271,
}

Reading = Callable[[Any, DeviceHandle], list[Sample]]
# NVML reasons that mean "this device never offers this reading": tried once, then dropped.
_UNSUPPORTED = ("not_supported", "function_not_found", "version_mismatch")
SLOW_EVERY = 10
COSTLY_EVERY = 5
"""Cumulative counters whose NVML calls cost milliseconds of CPU (energy: ~3 ms, the
throttle-time field batch: ~0.7 ms on an H200) are read every 5th poll. They are counters,
so rate() over any range of a minute or more is unaffected."""


class NvmlSource(SessionSource):
    """Polls plain NVML for every device of the session."""

    name = SOURCE
    readiness = True

    def __init__(
        self,
        session: NvmlSession,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(session, interval)
        self.clock = clock
        self._unsupported: dict[str, set[str]] = {}
        self._last_poll: float | None = None
        self._util_seconds: dict[str, float] = {}
        self._device_state: dict[str, str] = {}
        self._process_errors: dict[str, str] = {}
        # (key, reading, every N polls). Values that change rarely (limits, error counts)
        # are read every SLOW_EVERY polls, costly counters every COSTLY_EVERY, and repeated
        # in between, to keep polling under 1 % of a core per GPU.
        self._readings: list[tuple[str, Reading, int]] = [
            ("utilization", self._utilization, 1),
            ("memory", self._memory, 1),
            ("power", self._power, 1),
            ("power_limit", self._power_limit, SLOW_EVERY),
            ("energy", self._energy, COSTLY_EVERY),
            ("temperature", self._temperature, 1),
            ("clocks", self._clocks, 1),
            ("max_clocks", self._max_clocks, SLOW_EVERY),
            ("clock_events", self._clock_events, 1),
            ("clock_event_time", self._clock_event_time, COSTLY_EVERY),
            ("ecc", self._ecc, SLOW_EVERY),
            ("row_remap", self._row_remap, SLOW_EVERY),
        ]
        self._polls = 0
        self._cached: dict[tuple[str, str], list[Sample]] = {}

    def read(self) -> SourceResult:
        now = self.clock()
        elapsed = 0.0 if self._last_poll is None else now - self._last_poll
        self._last_poll = now
        nvml = self.session.nvml
        self._polls += 1
        devices: dict[str, tuple[Sample, ...]] = {}
        processes: list[ProcessInfo] = []
        errors: dict[str, int] = {}
        for dh in self.session.devices:
            samples, procs, reason = self._poll_device(nvml, dh, elapsed)
            devices[dh.device.gpu] = tuple(samples)
            processes.extend(procs)
            if reason:
                errors[reason] = errors.get(reason, 0) + 1
        return SourceResult(
            source=SOURCE,
            devices=devices,
            inventory=tuple(dh.device for dh in self.session.devices),
            processes=tuple(processes),
            errors=errors,
        )

    def _poll_device(
        self, nvml: Any, dh: DeviceHandle, elapsed: float
    ) -> tuple[list[Sample], list[ProcessInfo], str]:
        device = dh.device
        samples = [_info_sample(dh)]
        if dh.handle is None:
            samples.append(Sample(GPU_UP, 0.0, labels(reason="discovery_failed")))
            return samples, [], "discovery_failed"
        skip = self._unsupported.setdefault(device.gpu, set())
        for key, reading, every in self._readings:
            if key in skip:
                continue
            cached = self._cached.get((device.gpu, key))
            if cached is not None and self._polls % every:
                samples.extend(cached)
                continue
            try:
                fresh = reading(nvml, dh)
                if every > 1:
                    self._cached[(device.gpu, key)] = fresh
                samples.extend(fresh)
            except nvml.NVMLError as exc:
                reason = error_reason(nvml, exc)
                if reason in _UNSUPPORTED:
                    skip.add(key)
                    log.info(
                        "nvml_metric_unsupported",
                        gpu=device.gpu,
                        uuid=device.uuid,
                        metric=key,
                        reason=reason,
                    )
                    continue
                # The device as a whole failed (lost, no permission, ...): say so, stop here.
                self._state_change(device.gpu, reason, str(exc))
                for cache_key in [k for k in self._cached if k[0] == device.gpu]:
                    del self._cached[cache_key]  # re-read everything once it is back
                return [samples[0], Sample(GPU_UP, 0.0, labels(reason=reason))], [], reason
        procs = self._processes(nvml, dh)
        samples.append(Sample(PROCESSES, float(len(procs))))
        util = _find(samples, UTILIZATION)
        if util is not None:
            total = self._util_seconds.get(device.gpu, 0.0) + util * elapsed
            self._util_seconds[device.gpu] = total
            samples.append(Sample(UTILIZATION_SECONDS, total))
        samples.append(Sample(GPU_UP, 1.0, labels(reason="")))
        self._state_change(device.gpu, "", "")
        return samples, procs, ""

    def _state_change(self, gpu: str, reason: str, error: str) -> None:
        """Log a device going down or coming back once, not on every poll."""
        states = self._device_state
        if states.get(gpu, "") != reason:
            if reason:
                log.error("gpu_down", gpu=gpu, reason=reason, error=error)
            else:
                log.info("gpu_up", gpu=gpu)
            states[gpu] = reason

    def _processes(self, nvml: Any, dh: DeviceHandle) -> list[ProcessInfo]:
        skip = self._unsupported[dh.device.gpu]
        if "processes" in skip:
            return []
        gpu = dh.device.gpu
        try:
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(dh.handle)
        except nvml.NVMLError as exc:
            reason = error_reason(nvml, exc)
            if reason in _UNSUPPORTED:
                skip.add("processes")
                log.info("nvml_metric_unsupported", gpu=gpu, metric="processes", reason=reason)
                return []
            # Anything else may pass (a timeout, a process exiting mid-call): skip this poll
            # only, so attribution comes back, and say so once per change of reason.
            if self._process_errors.get(gpu, "") != reason:
                log.warning("nvml_processes_failed", gpu=gpu, reason=reason, error=str(exc))
                self._process_errors[gpu] = reason
            return []
        if self._process_errors.pop(gpu, ""):
            log.info("nvml_processes_ok", gpu=gpu)
        return [ProcessInfo(gpu, int(p.pid), _opt_int(p.usedGpuMemory)) for p in procs]

    # readings ---------------------------------------------------------------------------------
    @staticmethod
    def _utilization(nvml: Any, dh: DeviceHandle) -> list[Sample]:
        rates = nvml.nvmlDeviceGetUtilizationRates(dh.handle)
        return [
            Sample(UTILIZATION, rates.gpu / 100.0),
            Sample(MEMORY_UTILIZATION, rates.memory / 100.0),
        ]

    @staticmethod
    def _memory(nvml: Any, dh: DeviceHandle) -> list[Sample]:
        mem = nvml.nvmlDeviceGetMemoryInfo(dh.handle)
        return [Sample(MEMORY_USED, float(mem.used)), Sample(MEMORY_TOTAL, float(mem.total))]

    @staticmethod
    def _power(nvml: Any, dh: DeviceHandle) -> list[Sample]:
        return [Sample(POWER, nvml.nvmlDeviceGetPowerUsage(dh.handle) / 1000.0)]

    @staticmethod
    def _power_limit(nvml: Any, dh: DeviceHandle) -> list[Sample]:
        return [Sample(POWER_LIMIT, nvml.nvmlDeviceGetEnforcedPowerLimit(dh.handle) / 1000.0)]

    @staticmethod
    def _energy(nvml: Any, dh: DeviceHandle) -> list[Sample]:
        return [Sample(ENERGY, nvml.nvmlDeviceGetTotalEnergyConsumption(dh.handle) / 1000.0)]

    @staticmethod
    def _temperature(nvml: Any, dh: DeviceHandle) -> list[Sample]:
        value = nvml.nvmlDeviceGetTemperature(dh.handle, nvml.NVML_TEMPERATURE_GPU)
        return [Sample(TEMPERATURE, float(value))]

    @staticmethod
    def _clocks(nvml: Any, dh: DeviceHandle) -> list[Sample]:
        sm = nvml.nvmlDeviceGetClockInfo(dh.handle, nvml.NVML_CLOCK_SM)
        mem = nvml.nvmlDeviceGetClockInfo(dh.handle, nvml.NVML_CLOCK_MEM)
        return [
            Sample(CLOCK, sm * 1e6, labels(domain="sm")),
            Sample(CLOCK, mem * 1e6, labels(domain="memory")),
        ]

    @staticmethod
    def _max_clocks(nvml: Any, dh: DeviceHandle) -> list[Sample]:
        sm = nvml.nvmlDeviceGetMaxClockInfo(dh.handle, nvml.NVML_CLOCK_SM)
        mem = nvml.nvmlDeviceGetMaxClockInfo(dh.handle, nvml.NVML_CLOCK_MEM)
        return [
            Sample(CLOCK_MAX, sm * 1e6, labels(domain="sm")),
            Sample(CLOCK_MAX, mem * 1e6, labels(domain="memory")),
        ]

    @staticmethod
    def _clock_events(nvml: Any, dh: DeviceHandle) -> list[Sample]:
        mask = nvml.nvmlDeviceGetCurrentClocksEventReasons(dh.handle)
        return [
            Sample(CLOCK_EVENT_ACTIVE, 1.0 if mask & bit else 0.0, labels(reason=reason))
            for reason, bit in CLOCK_EVENT_BITS.items()
        ]

    @staticmethod
    def _clock_event_time(nvml: Any, dh: DeviceHandle) -> list[Sample]:
        ids = list(CLOCK_EVENT_FIELDS.values())
        values = nvml.nvmlDeviceGetFieldValues(dh.handle, ids)
        out = []
        for reason, fv in zip(CLOCK_EVENT_FIELDS, values, strict=True):
            if fv.nvmlReturn != nvml.NVML_SUCCESS:
                continue
            out.append(Sample(CLOCK_EVENT_SECONDS, _field_value(fv) / 1e9, labels(reason=reason)))
        if not out:
            raise nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
        return out

    @staticmethod
    def _ecc(nvml: Any, dh: DeviceHandle) -> list[Sample]:
        out = []
        for kind, err_type in (
            ("corrected", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("uncorrected", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            count = nvml.nvmlDeviceGetTotalEccErrors(dh.handle, err_type, nvml.NVML_VOLATILE_ECC)
            out.append(Sample(ECC_ERRORS, float(count), labels(type=kind)))
        return out

    @staticmethod
    def _row_remap(nvml: Any, dh: DeviceHandle) -> list[Sample]:
        corr, unc, pending, failure = nvml.nvmlDeviceGetRemappedRows(dh.handle)
        return [
            Sample(REMAPPED_ROWS, float(corr), labels(cause="correctable")),
            Sample(REMAPPED_ROWS, float(unc), labels(cause="uncorrectable")),
            Sample(ROW_REMAP_PENDING, 1.0 if pending else 0.0),
            Sample(ROW_REMAP_FAILURE, 1.0 if failure else 0.0),
        ]


def _info_sample(dh: DeviceHandle) -> Sample:
    d = dh.device
    return Sample(
        GPU_INFO,
        1.0,
        labels(
            name=d.name,
            pci_bus_id=d.pci_bus_id,
            driver_version=d.driver_version,
            mig_parent_uuid=d.parent_uuid,
            gpu_instance_id=d.gpu_instance_id,
            compute_instance_id=d.compute_instance_id,
            mig_profile=d.mig_profile,
        ),
    )


def _find(samples: list[Sample], name: str) -> float | None:
    for s in samples:
        if s.name == name:
            return s.value
    return None


def _opt_int(value: Any) -> int | None:
    if value is None:
        return None
    value = int(value)
    # NVML reports NVML_VALUE_NOT_AVAILABLE (all ones) when memory use is unknown.
    return None if value >= 0xFFFFFFFFFFFF else value


_VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _field_value(fv: Any) -> float:
    """Decode a ``c_nvmlFieldValue_t`` by its ``valueType``."""
    name = _VALUE_FIELDS[fv.valueType] if 0 <= fv.valueType < len(_VALUE_FIELDS) else "ullVal"
    return float(getattr(fv.value, name))
