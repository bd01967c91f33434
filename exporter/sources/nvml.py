"""NVML source: identity, health, kernel-time utilization, memory, power, energy, clocks,
throttling, ECC, row remapping and compute processes of every GPU and MIG instance.

Utilization is the average of NVML's utilization samples over the poll window
(exporter/sources/utilization.py), not NVML's last sample period; where the device does not
keep samples it falls back to ``nvmlDeviceGetUtilizationRates``, says so once in the log and
on ``goodput_gpu_utilization_method_info``.

Each reading is one small function. A reading that raises NOT_SUPPORTED is dropped for that
device after the first try (said once in the log); GPU_IS_LOST marks the device lost; any
other error marks it down with the reason, and the other devices go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog

from exporter.readings import Device, GpuState, NvmlReading, ProcessActivity, ProcessInfo
from exporter.snapshot import SourceResult
from exporter.sources import utilization as util_window
from exporter.sources.nvml_session import DeviceHandle, NvmlSession, SessionSource, error_reason

log = structlog.get_logger("nvml")

SOURCE = "nvml"

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

Reading = Callable[[Any, DeviceHandle], dict[str, Any]]
"""A reading returns the GpuState fields it read, by field name."""
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
    starts_first = True
    gpu_poll = True

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
        self._util_seen_us: dict[str, int] = {}
        """Newest utilization sample's timestamp per GPU (the next call's last seen)."""
        self._util_last: dict[str, float] = {}
        self._util_by_period: set[str] = set()
        self._util_said = False
        self._util_errors: dict[str, str] = {}
        """GPUs whose driver keeps no utilization samples: read by the last period."""
        self._device_state: dict[str, str] = {}
        self._process_errors: dict[str, str] = {}
        self._activity = ProcessSamples()
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
        self._cached: dict[tuple[str, str], dict[str, Any]] = {}

    def poll_session(self) -> SourceResult:
        now = self.clock()
        elapsed = 0.0 if self._last_poll is None else now - self._last_poll
        self._last_poll = now
        nvml = self.session.nvml
        self._polls += 1
        states: dict[str, GpuState] = {}
        errors: dict[str, int] = {}
        for dh in self.session.devices:
            state, reason = self._poll_device(nvml, dh, elapsed)
            states[dh.device.gpu] = state
            if reason:
                errors[reason] = errors.get(reason, 0) + 1
        return SourceResult(
            source=SOURCE,
            reading=NvmlReading(tuple(dh.device for dh in self.session.devices), states),
            errors=errors,
        )

    def _poll_device(self, nvml: Any, dh: DeviceHandle, elapsed: float) -> tuple[GpuState, str]:
        device = dh.device
        if dh.handle is None:
            return GpuState(up=False, reason="discovery_failed"), "discovery_failed"
        skip = self._unsupported.setdefault(device.gpu, set())
        fields: dict[str, Any] = {}
        for key, reading, every in self._readings:
            if key in skip:
                continue
            cached = self._cached.get((device.gpu, key))
            if cached is not None and self._polls % every:
                fields.update(cached)
                continue
            try:
                fresh = reading(nvml, dh)
            except nvml.NVMLError as exc:
                reason = error_reason(nvml, exc)
                if reason in _UNSUPPORTED:
                    self._drop(device, key, reason, str(exc))
                    continue
                # The device as a whole failed (lost, no permission, ...): say so, stop here.
                self._state_change(device.gpu, reason, str(exc))
                for cache_key in [k for k in self._cached if k[0] == device.gpu]:
                    del self._cached[cache_key]  # re-read everything once it is back
                return GpuState(up=False, reason=reason), reason
            except Exception as exc:  # an older binding lacking a call: costs this reading only
                self._drop(device, key, "binding_error", f"{type(exc).__name__}: {exc}")
                continue
            if every > 1:
                self._cached[(device.gpu, key)] = fresh
            fields.update(fresh)
        procs = self._processes(nvml, dh)
        busy = fields.pop("utilization_busy_seconds", None)
        activity = self._process_activity(nvml, dh)
        util = fields.get("utilization")
        if util is not None:
            added = util * elapsed if busy is None else busy
            total = self._util_seconds.get(device.gpu, 0.0) + added
            self._util_seconds[device.gpu] = total
            fields["utilization_seconds"] = total
        self._state_change(device.gpu, "", "")
        return GpuState(
            up=True,
            processes=tuple(procs or ()),
            process_count=None if procs is None else len(procs),
            process_activity=activity,
            **fields,
        ), ""

    def _drop(self, device: Device, key: str, reason: str, error: str) -> None:
        """Stop asking a device for one reading it cannot give; said once in the log."""
        self._unsupported.setdefault(device.gpu, set()).add(key)
        log.info(
            "nvml_metric_unsupported",
            gpu=device.gpu,
            uuid=device.uuid,
            metric=key,
            reason=reason,
            error=error,
        )

    def _state_change(self, gpu: str, reason: str, error: str) -> None:
        """Log a device going down or coming back once, not on every poll."""
        states = self._device_state
        if states.get(gpu, "") != reason:
            if reason:
                log.error("gpu_down", gpu=gpu, reason=reason, error=error)
            else:
                log.info("gpu_up", gpu=gpu)
            states[gpu] = reason

    def _processes(self, nvml: Any, dh: DeviceHandle) -> list[ProcessInfo] | None:
        skip = self._unsupported[dh.device.gpu]
        if "processes" in skip:
            return None
        gpu = dh.device.gpu
        try:
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(dh.handle)
        except nvml.NVMLError as exc:
            reason = error_reason(nvml, exc)
            if reason in _UNSUPPORTED:
                skip.add("processes")
                log.info("nvml_metric_unsupported", gpu=gpu, metric="processes", reason=reason)
                return None
            # Anything else may pass (a timeout, a process exiting mid-call): skip this poll
            # only, so attribution comes back, and say so once per change of reason.
            if self._process_errors.get(gpu, "") != reason:
                log.warning("nvml_processes_failed", gpu=gpu, reason=reason, error=str(exc))
                self._process_errors[gpu] = reason
            return None
        if self._process_errors.pop(gpu, ""):
            log.info("nvml_processes_ok", gpu=gpu)
        found = [ProcessInfo(gpu, int(p.pid), _opt_int(p.usedGpuMemory)) for p in procs]
        clients = {p.pid: p for p in self._mps_clients(nvml, dh)}
        found = [replace(p, mps_client=True) if p.pid in clients else p for p in found]
        listed = {p.pid for p in found}
        return found + [p for pid, p in clients.items() if pid not in listed]

    def _mps_clients(self, nvml: Any, dh: DeviceHandle) -> list[ProcessInfo]:
        """Processes with an MPS compute context: under MPS the clients of the control
        daemon are listed here, not (only) in the compute list, and each is a holder of the
        GPU. A driver or binding without the call, or MIG, costs nothing after one try."""
        skip = self._unsupported[dh.device.gpu]
        if "mps_processes" in skip:
            return []
        try:
            procs = nvml.nvmlDeviceGetMPSComputeRunningProcesses(dh.handle)
        except nvml.NVMLError as exc:
            if error_reason(nvml, exc) in _UNSUPPORTED:
                skip.add("mps_processes")
            return []  # anything else: this poll only (the compute list still counts)
        except Exception:  # an older binding without the call
            skip.add("mps_processes")
            return []
        gpu = dh.device.gpu
        return [ProcessInfo(gpu, int(p.pid), _opt_int(p.usedGpuMemory), mps_client=True)
                for p in procs]

    def _process_activity(self, nvml: Any, dh: DeviceHandle) -> tuple[ProcessActivity, ...] | None:
        """What each process ran since the last poll (NVML's per-process samples); None when
        the device cannot say (MIG, an old driver) or on the first poll, which has no window."""
        gpu = dh.device.gpu
        skip = self._unsupported[gpu]
        if "process_utilization" in skip or dh.device.is_mig:
            return None  # NVML documents per-process utilization as unsupported on MIG
        try:
            return self._activity.read(nvml, gpu, dh.handle)
        except nvml.NVMLError as exc:
            reason = error_reason(nvml, exc)
            if reason in _UNSUPPORTED:
                self._drop(dh.device, "process_utilization", reason, str(exc))
                return None
            if self._process_errors.get(gpu, "") != reason:
                log.warning("nvml_process_samples_failed", gpu=gpu, reason=reason, error=str(exc))
                self._process_errors[gpu] = reason
            return None
        except Exception as exc:  # a binding without either call: costs this reading only
            self._drop(dh.device, "process_utilization", "binding_error",
                       f"{type(exc).__name__}: {exc}")
            return None

    # readings ---------------------------------------------------------------------------------
    def _utilization(self, nvml: Any, dh: DeviceHandle) -> dict[str, Any]:
        """The window's utilization from NVML's samples since the last poll, else (no
        samples kept on this device) NVML's last sample period. The memory controller's
        share stays NVML's last period (a second samples call costs another 1.4 ms)."""
        gpu = dh.device.gpu
        rates = nvml.nvmlDeviceGetUtilizationRates(dh.handle)
        fields: dict[str, Any] = {
            "utilization": rates.gpu / 100.0,
            "memory_controller_utilization": rates.memory / 100.0,
            "utilization_method": util_window.LAST_PERIOD,
        }
        if gpu in self._util_by_period:
            return fields
        try:
            value_type, samples = nvml.nvmlDeviceGetSamples(
                dh.handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, self._util_seen_us.get(gpu, 0))
        except nvml.NVMLError as exc:
            reason = error_reason(nvml, exc)
            if reason == "not_found":
                return self._hold(gpu, fields)
            if reason == "gpu_lost":
                raise
            if reason not in _UNSUPPORTED:
                # A transient failure (a timeout): NVML's last period for this poll only.
                if self._util_errors.get(gpu, "") != reason:
                    log.warning("nvml_utilization_samples_failed", gpu=gpu, reason=reason,
                                error=str(exc))
                    self._util_errors[gpu] = reason
                return fields
            self._util_by_period.add(gpu)
            log.info("nvml_utilization_method", gpu=gpu, uuid=dh.device.uuid,
                     method=util_window.LAST_PERIOD, reason=reason, error=str(exc))
            return fields
        self._util_errors.pop(gpu, None)
        seen = self._util_seen_us.get(gpu)
        got = util_window.window(samples, value_type, seen, first_seconds=self.interval)
        if got is None:
            return self._hold(gpu, fields)
        if not self._util_said:
            # The expected method is a debug line (the start-up screen stays the `started`
            # line and the verdicts); a fallback is said per GPU at info.
            self._util_said = True
            log.debug("nvml_utilization_method", method=util_window.SAMPLES)
        self._util_seen_us[gpu] = got.newest_us
        self._util_last[gpu] = got.utilization
        fields.update(utilization=got.utilization, utilization_method=util_window.SAMPLES,
                      utilization_busy_seconds=0.0 if seen is None else got.busy_seconds)
        return fields

    def _hold(self, gpu: str, fields: dict[str, Any]) -> dict[str, Any]:
        """No sample newer than the last one seen (NVML_ERROR_NOT_FOUND, or an empty list):
        polled faster than NVML samples. The last window's value holds and adds no busy
        time: the next samples cover this time. Before any window, NVML's last period."""
        if gpu in self._util_last:
            fields.update(utilization=self._util_last[gpu], utilization_busy_seconds=0.0,
                          utilization_method=util_window.SAMPLES)
        return fields

    @staticmethod
    def _memory(nvml: Any, dh: DeviceHandle) -> dict[str, Any]:
        mem = nvml.nvmlDeviceGetMemoryInfo(dh.handle)
        return {"memory_used_bytes": float(mem.used), "memory_total_bytes": float(mem.total)}

    @staticmethod
    def _power(nvml: Any, dh: DeviceHandle) -> dict[str, Any]:
        return {"power_watts": nvml.nvmlDeviceGetPowerUsage(dh.handle) / 1000.0}

    @staticmethod
    def _power_limit(nvml: Any, dh: DeviceHandle) -> dict[str, Any]:
        return {"power_limit_watts": nvml.nvmlDeviceGetEnforcedPowerLimit(dh.handle) / 1000.0}

    @staticmethod
    def _energy(nvml: Any, dh: DeviceHandle) -> dict[str, Any]:
        return {"energy_joules": nvml.nvmlDeviceGetTotalEnergyConsumption(dh.handle) / 1000.0}

    @staticmethod
    def _temperature(nvml: Any, dh: DeviceHandle) -> dict[str, Any]:
        value = nvml.nvmlDeviceGetTemperature(dh.handle, nvml.NVML_TEMPERATURE_GPU)
        return {"temperature_celsius": float(value)}

    @staticmethod
    def _clocks(nvml: Any, dh: DeviceHandle) -> dict[str, Any]:
        sm = nvml.nvmlDeviceGetClockInfo(dh.handle, nvml.NVML_CLOCK_SM)
        mem = nvml.nvmlDeviceGetClockInfo(dh.handle, nvml.NVML_CLOCK_MEM)
        return {"clocks_hertz": (("sm", sm * 1e6), ("memory", mem * 1e6))}

    @staticmethod
    def _max_clocks(nvml: Any, dh: DeviceHandle) -> dict[str, Any]:
        sm = nvml.nvmlDeviceGetMaxClockInfo(dh.handle, nvml.NVML_CLOCK_SM)
        mem = nvml.nvmlDeviceGetMaxClockInfo(dh.handle, nvml.NVML_CLOCK_MEM)
        return {"max_clocks_hertz": (("sm", sm * 1e6), ("memory", mem * 1e6))}

    @staticmethod
    def _clock_events(nvml: Any, dh: DeviceHandle) -> dict[str, Any]:
        mask = nvml.nvmlDeviceGetCurrentClocksEventReasons(dh.handle)
        return {
            "clock_events": tuple(
                (reason, bool(mask & bit)) for reason, bit in CLOCK_EVENT_BITS.items()
            )
        }

    @staticmethod
    def _clock_event_time(nvml: Any, dh: DeviceHandle) -> dict[str, Any]:
        ids = list(CLOCK_EVENT_FIELDS.values())
        values = nvml.nvmlDeviceGetFieldValues(dh.handle, ids)
        out = []
        for reason, fv in zip(CLOCK_EVENT_FIELDS, values, strict=True):
            if fv.nvmlReturn != nvml.NVML_SUCCESS:
                continue
            out.append((reason, _field_value(fv) / 1e9))
        if not out:
            raise nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
        return {"clock_event_seconds": tuple(out)}

    @staticmethod
    def _ecc(nvml: Any, dh: DeviceHandle) -> dict[str, Any]:
        out = []
        for kind, err_type in (
            ("corrected", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("uncorrected", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            count = nvml.nvmlDeviceGetTotalEccErrors(dh.handle, err_type, nvml.NVML_VOLATILE_ECC)
            out.append((kind, float(count)))
        return {"ecc_errors": tuple(out)}

    @staticmethod
    def _row_remap(nvml: Any, dh: DeviceHandle) -> dict[str, Any]:
        corr, unc, pending, failure = nvml.nvmlDeviceGetRemappedRows(dh.handle)
        return {
            "remapped_rows": (("correctable", float(corr)), ("uncorrectable", float(unc))),
            "row_remap_pending": bool(pending),
            "row_remap_failure": bool(failure),
        }


class ProcessSamples:
    """Per-process utilization samples since the previous poll, per device.

    ``nvmlDeviceGetProcessesUtilizationInfo`` (drivers since R550; else the older
    ``nvmlDeviceGetProcessUtilization``, same fields less jpg/ofa) returns the samples newer
    than the timestamp passed: one per process and driver sample period in which it ran a
    kernel or touched memory. NOT_FOUND means no process had any since then (an empty
    window, not an error). The newest timestamp seen is passed on the next poll, so no
    sample is counted twice; a process that exited mid-window keeps the samples it left.
    """

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._legacy = False

    def read(self, nvml: Any, gpu: str, handle: Any) -> tuple[ProcessActivity, ...] | None:
        first = gpu not in self._last
        last = self._last.get(gpu, 0)
        try:
            samples = self._samples(nvml, handle, last)
        except nvml.NVMLError as exc:
            # NOT_FOUND: no process ran since ``last``. The binding also raises its own
            # NVMLError(NVML_SUCCESS) when the driver answers "0 samples" to its size query.
            empty = getattr(exc, "value", None) == getattr(nvml, "NVML_SUCCESS", 0)
            if not empty and error_reason(nvml, exc) != "not_found":
                raise
            samples = []
        newest = max((int(s.timeStamp) for s in samples), default=last)
        self._last[gpu] = max(newest, last)
        if first:
            return None  # the driver's whole buffer, not one window: only the timestamp counts
        return aggregate(samples, after=last)

    def _samples(self, nvml: Any, handle: Any, last: int) -> list[Any]:
        if not self._legacy:
            try:
                return list(nvml.nvmlDeviceGetProcessesUtilizationInfo(handle, last))
            except nvml.NVMLError as exc:
                if error_reason(nvml, exc) not in _UNSUPPORTED:
                    raise
            except AttributeError:
                pass
            self._legacy = True
        return list(nvml.nvmlDeviceGetProcessUtilization(handle, last))


def aggregate(samples: Any, after: int = 0) -> tuple[ProcessActivity, ...]:
    """Samples to one :class:`ProcessActivity` per pid (sorted); a (pid, timestamp) seen
    twice counts once, samples at or before ``after`` not at all."""
    seen: set[tuple[int, int]] = set()
    sums: dict[int, list[float]] = {}
    for s in samples:
        pid, ts = int(s.pid), int(s.timeStamp)
        if ts <= after or (pid, ts) in seen:
            continue
        seen.add((pid, ts))
        row = sums.setdefault(pid, [0, 0.0, 0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += _percent(s.smUtil)
        row[2] += _percent(s.memUtil)
        row[3] += _percent(s.encUtil)
        row[4] += _percent(s.decUtil)
    return tuple(
        ProcessActivity(pid, int(n), kernel, memory, enc, dec)
        for pid, (n, kernel, memory, enc, dec) in sorted(sums.items())
    )


def _percent(value: Any) -> float:
    """An NVML percentage as a ratio, clamped to 0..1 (garbage from a driver stays bounded)."""
    v = float(value)
    return min(v, 100.0) / 100.0 if v > 0.0 else 0.0  # NaN and negatives read as 0


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
