"""A drop-in for the ``pynvml`` module (nvidia-ml-py) backed by simulated GPUs.

It exposes the same function names, arguments, return structures (the real ctypes structures
from pynvml where the sources read fields) and ``NVMLError`` codes as the real bindings, so
the NVML, GPM and XID sources run the exact code path they run on a GPU node. Constants,
structures and error classes are taken from the installed ``pynvml`` itself; only the calls
into the driver are replaced.

Faults can be injected per GPU (``fail``: function name -> NVML error code; ``unsupported``;
``lost_after``), which is how the tests exercise every error path.
"""

from __future__ import annotations

import ctypes
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml as _real

from exporter.sim.physics import THROTTLE_HW_THERMAL as _HW_THERM
from exporter.sim.physics import THROTTLE_SW_THERMAL as _SW_THERM
from exporter.sim.physics import GpuPhysics, GpuSpec, Pattern

NVMLError = _real.NVMLError

# GPM metric id -> physics integral, scale (percent metrics x100, bandwidth already MiB/s).
_GPM_RATIOS: dict[int, tuple[str, float]] = {
    1: ("graphics", 100.0),
    2: ("sm_active", 100.0),
    3: ("sm_occupancy", 100.0),
    4: ("integer", 100.0),
    5: ("tensor", 100.0),
    6: ("dfma", 100.0),
    7: ("hmma", 100.0),
    8: ("dmma", 100.0),
    9: ("imma", 100.0),
    10: ("dram", 100.0),
    11: ("fp64", 100.0),
    12: ("fp32", 100.0),
    13: ("fp16", 100.0),
    20: ("pcie_tx_mib", 1.0),
    21: ("pcie_rx_mib", 1.0),
    60: ("nvlink_rx_mib", 1.0),
    61: ("nvlink_tx_mib", 1.0),
}
SAMPLE_PERIOD = 0.2
"""Seconds between NVML's utilization samples (about 200 ms measured on an H200)."""
SAMPLES_KEPT = 71
"""Utilization samples the driver keeps (71 measured on an H200)."""
SAMPLE_EPOCH_US = 1_764_000_000_000_000
"""Where the simulated driver's sample clock (µs, like the CPU timestamps NVML uses) is
at the fake's start."""
_SAMPLED = {"NVML_GPU_UTILIZATION_SAMPLES": "util", "NVML_MEMORY_UTILIZATION_SAMPLES": "mem_util"}
UTILIZATION_PERIOD = 1.0  # seconds NVML's utilization averages over (1/6 s to 1 s by product)
PROCESS_SAMPLE_PERIOD = 1 / 6  # seconds per per-process utilization sample (the driver's period)
PROCESS_SAMPLES_KEPT = 128  # the driver keeps a bounded ring of per-process samples
_FIELD_THROTTLE = {269: _SW_THERM, 270: _HW_THERM}
_FIELD_ZERO = {74, 76, 271}  # throttle reasons the simulation never raises: counters stay 0


def _raise(code: int) -> None:
    raise NVMLError(code)


@dataclass
class FakeMig:
    gpu_instance_id: int
    compute_instance_id: int
    uuid: str
    memory_total_bytes: int
    memory_used_bytes: int = 0
    profile: str = "1g.10gb"
    """GPU instance profile; NVML names a MIG device after it."""


@dataclass
class FakeGpu:
    """One simulated GPU and the faults injected into it."""

    index: int
    physics: GpuPhysics
    uuid: str = ""
    pci_bus_id: str = ""
    processes: list[tuple[int, int]] = field(default_factory=list)
    lost_after: float | None = None
    gpm_supported: bool = True
    fail: dict[str, int] = field(default_factory=dict)
    unsupported: set[str] = field(default_factory=set)
    mig: list[FakeMig] = field(default_factory=list)
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)
    xid_on_loss: int = 79
    pcie_generation: int = 5
    pcie_width: int = 16
    nvlinks: int = 18
    """NVLinks up (version 4, as on an H100 SXM); 0 for a PCIe card (NOT_SUPPORTED)."""
    process_load: dict[int, tuple[float, float]] = field(default_factory=dict)
    """pid -> (kernel-time ratio, memory ratio) it runs now: every sample period the driver
    records one per-process sample for each pid with either above 0. Change it as processes
    start, stop or exit; call :meth:`FakeNvml.sample` first so the past keeps its loads."""
    mps_processes: list[tuple[int, int]] = field(default_factory=list)
    """(pid, used memory) of MPS clients: what nvmlDeviceGetMPSComputeRunningProcesses lists."""
    process_samples: list[tuple[int, int, int, int]] = field(default_factory=list)
    """The driver's ring of per-process samples: (timestamp in us, pid, smUtil, memUtil)."""
    sampled_until: float | None = None

    def __post_init__(self) -> None:
        if not self.uuid:
            self.uuid = f"GPU-5e1f0000-0000-4000-8000-{self.index:012d}"
        if not self.pci_bus_id:
            self.pci_bus_id = f"00000000:{0x18 + self.index * 0x10:02X}:00.0"


class _Handle:
    """Opaque device handle (the real one is a ctypes pointer the caller never reads)."""

    def __init__(self, gpu: FakeGpu, mig: FakeMig | None = None) -> None:
        self.gpu = gpu
        self.mig = mig

    def __repr__(self) -> str:
        suffix = f"/mig{self.mig.gpu_instance_id}" if self.mig else ""
        return f"<fake nvmlDevice {self.gpu.index}{suffix}>"


@dataclass
class _GpmSampleData:
    t: float = 0.0
    ratios: dict[str, float] = field(default_factory=dict)
    filled: bool = False


class _EventSet:
    def __init__(self) -> None:
        self.queue: queue.Queue[tuple[_Handle, int, int]] = queue.Queue()
        self.registered: dict[int, tuple[_Handle, int]] = {}


class FakeNvml:
    """Module-like object; pass it wherever the sources expect ``pynvml``."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        clock: Callable[[], float] = time.monotonic,
        driver_version: str = "580.159.04",
        library_present: bool = True,
    ) -> None:
        self.gpus = gpus
        self.clock = clock
        self.driver_version = driver_version
        self.library_present = library_present
        self.initialized = 0
        self.calls: dict[str, int] = {}
        self._lock = threading.RLock()
        self._samples: dict[int, _GpmSampleData] = {}
        self._buffers: dict[int, Any] = {}
        self._event_sets: list[_EventSet] = []
        self._lost_announced: set[int] = set()
        self._start = clock()

    def __getattr__(self, name: str) -> Any:
        # Constants, structures and error classes come from the real bindings.
        if name.startswith(("NVML_", "nvmlClocksEvent", "nvmlEventType", "c_nvml", "nvml")):
            value = getattr(_real, name)
            is_function = callable(value) and not isinstance(value, type)
            if is_function and not name.startswith(("nvmlClocksEvent", "nvmlEventType")):
                raise AttributeError(f"fake NVML does not implement {name}")
            return value
        if name.startswith("NVMLError"):
            return getattr(_real, name)
        raise AttributeError(name)

    # -- plumbing ------------------------------------------------------------------------
    def _enter(self, name: str, handle: _Handle | None = None) -> FakeGpu | None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if not self.initialized:
            _raise(_real.NVML_ERROR_UNINITIALIZED)
        if handle is None:
            return None
        gpu = handle.gpu
        if self._is_lost(gpu):
            _raise(_real.NVML_ERROR_GPU_IS_LOST)
        if name in gpu.fail:
            _raise(gpu.fail[name])
        if name in gpu.unsupported:
            _raise(_real.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _is_lost(self, gpu: FakeGpu) -> bool:
        if gpu.lost_after is None or self.clock() - self._start < gpu.lost_after:
            return False
        if gpu.index not in self._lost_announced:
            self._lost_announced.add(gpu.index)
            for es in self._event_sets:
                reg = es.registered.get(gpu.index)
                if reg and reg[1] & _real.nvmlEventTypeXidCriticalError:
                    es.queue.put((reg[0], _real.nvmlEventTypeXidCriticalError, gpu.xid_on_loss))
        return True

    def _act(self, gpu: FakeGpu) -> Any:
        return gpu.physics.activity(self.clock())

    # -- library -----------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] = self.calls.get("nvmlInit", 0) + 1
        if not self.library_present:
            _raise(_real.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        if "nvmlDeviceGetHandleByIndex" in gpu.fail:
            _raise(gpu.fail["nvmlDeviceGetHandleByIndex"])
        return _Handle(gpu)

    # -- identity ----------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        self._enter("nvmlDeviceGetUUID", handle)
        return handle.mig.uuid if handle.mig else handle.gpu.uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        gpu = self._enter("nvmlDeviceGetName", handle)
        assert gpu is not None
        name = gpu.physics.spec.name
        return f"{name} MIG {handle.mig.profile}" if handle.mig else name

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> Any:
        gpu = self._enter("nvmlDeviceGetPciInfo", handle)
        assert gpu is not None
        info = _real.nvmlPciInfo_t()
        info.busId = gpu.pci_bus_id.encode()
        info.busIdLegacy = gpu.pci_bus_id[4:].encode()
        return info

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: _Handle) -> int:
        gpu = self._enter("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        assert gpu is not None
        return gpu.pcie_generation

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: _Handle) -> int:
        gpu = self._enter("nvmlDeviceGetMaxPcieLinkWidth", handle)
        assert gpu is not None
        return gpu.pcie_width

    def nvmlDeviceGetNvLinkState(self, handle: _Handle, link: int) -> int:
        gpu = self._enter("nvmlDeviceGetNvLinkState", handle)
        assert gpu is not None
        if gpu.nvlinks == 0:
            _raise(_real.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < 18:
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        up = link < gpu.nvlinks
        return int(_real.NVML_FEATURE_ENABLED if up else _real.NVML_FEATURE_DISABLED)

    def nvmlDeviceGetNvLinkVersion(self, handle: _Handle, link: int) -> int:
        self.nvmlDeviceGetNvLinkState(handle, link)
        return 4

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> tuple[int, int]:
        gpu = self._enter("nvmlDeviceGetMigMode", handle)
        assert gpu is not None
        if not gpu.mig:
            _raise(_real.NVML_ERROR_NOT_SUPPORTED)
        return (_real.NVML_DEVICE_MIG_ENABLE, _real.NVML_DEVICE_MIG_ENABLE)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        gpu = self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        assert gpu is not None
        return 7 if gpu.mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        gpu = self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        assert gpu is not None
        if index >= len(gpu.mig):
            _raise(_real.NVML_ERROR_NOT_FOUND)
        return _Handle(gpu, gpu.mig[index])

    def nvmlDeviceGetGpuInstanceId(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", handle)
        if handle.mig is None:
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        assert handle.mig is not None
        return handle.mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId", handle)
        if handle.mig is None:
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        assert handle.mig is not None
        return handle.mig.compute_instance_id

    # -- telemetry ---------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        gpu = self._enter("nvmlDeviceGetUtilizationRates", handle)
        assert gpu is not None
        if handle.mig is not None:
            _raise(_real.NVML_ERROR_NOT_SUPPORTED)  # documented: not supported on MIG
        # NVML's last sample period, not the caller's window: the newest sample's value.
        at = self._start + self._newest_sample(self.clock()) * SAMPLE_PERIOD
        rates = _real.c_nvmlUtilization_t()
        rates.gpu = round(gpu.physics.mean(at, SAMPLE_PERIOD, "util", points=8) * 100)
        rates.memory = round(gpu.physics.mean(at, SAMPLE_PERIOD, "mem_util", points=8) * 100)
        return rates

    def _newest_sample(self, now: float) -> int:
        """Index of the driver's newest utilization sample (sample k at k periods)."""
        return int((now - self._start) / SAMPLE_PERIOD + 1e-6)

    def nvmlDeviceGetSamples(self, handle: _Handle, sampling_type: int, timestamp: int) -> Any:
        """``(valueType, [c_nvmlSample_t])``: the samples newer than ``timestamp`` (µs) the
        simulated driver keeps, one every :data:`SAMPLE_PERIOD`, each the mean over its own
        period. NOT_FOUND when none is newer (as the driver says it), NOT_SUPPORTED on MIG
        and for sample types the simulation does not keep (power, clocks, codecs)."""
        gpu = self._enter("nvmlDeviceGetSamples", handle)
        assert gpu is not None
        field_by_type = {getattr(_real, name): f for name, f in _SAMPLED.items()}
        if handle.mig is not None or sampling_type not in field_by_type:
            _raise(_real.NVML_ERROR_NOT_SUPPORTED)
        name = field_by_type[sampling_type]
        newest = self._newest_sample(self.clock())
        out = []
        for k in range(newest - SAMPLES_KEPT + 1, newest + 1):
            stamp = SAMPLE_EPOCH_US + round(k * SAMPLE_PERIOD * 1e6)
            if stamp <= timestamp:
                continue
            sample = _real.c_nvmlSample_t()
            sample.timeStamp = stamp
            at = self._start + k * SAMPLE_PERIOD
            mean = gpu.physics.mean(at, SAMPLE_PERIOD, name, points=8)
            sample.sampleValue.uiVal = round(min(max(mean, 0.0), 1.0) * 100)
            out.append(sample)
        if not out:
            _raise(_real.NVML_ERROR_NOT_FOUND)
        return _real.NVML_VALUE_TYPE_UNSIGNED_INT, out

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> Any:
        gpu = self._enter("nvmlDeviceGetMemoryInfo", handle)
        assert gpu is not None
        mem = _real.c_nvmlMemory_t()
        if handle.mig is not None:
            mem.total, mem.used = handle.mig.memory_total_bytes, handle.mig.memory_used_bytes
        else:
            mem.total = gpu.physics.spec.memory_total_bytes
            mem.used = self._act(gpu).memory_used_bytes
        mem.free = mem.total - mem.used
        return mem

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        gpu = self._enter("nvmlDeviceGetPowerUsage", handle)
        assert gpu is not None
        return int(gpu.physics.power_watts(self._act(gpu)) * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        gpu = self._enter("nvmlDeviceGetEnforcedPowerLimit", handle)
        assert gpu is not None
        return int(gpu.physics.spec.power_limit_watts * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        gpu = self._enter("nvmlDeviceGetTotalEnergyConsumption", handle)
        assert gpu is not None
        gpu.physics.advance(self.clock())
        return int(gpu.physics.integrals.energy_mj)

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        gpu = self._enter("nvmlDeviceGetTemperature", handle)
        assert gpu is not None
        if sensor != _real.NVML_TEMPERATURE_GPU:
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        return round(gpu.physics.temperature(self.clock()))

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock_type: int) -> int:
        gpu = self._enter("nvmlDeviceGetClockInfo", handle)
        assert gpu is not None
        if clock_type == _real.NVML_CLOCK_MEM:
            return gpu.physics.spec.mem_mhz
        return gpu.physics.sm_clock_mhz(self._act(gpu))

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, clock_type: int) -> int:
        gpu = self._enter("nvmlDeviceGetMaxClockInfo", handle)
        assert gpu is not None
        if clock_type == _real.NVML_CLOCK_MEM:
            return gpu.physics.spec.mem_mhz
        return gpu.physics.spec.max_sm_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        gpu = self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle)
        assert gpu is not None
        return int(self._act(gpu).throttle_mask)

    def nvmlDeviceGetFieldValues(self, handle: _Handle, field_ids: list[Any]) -> Any:
        gpu = self._enter("nvmlDeviceGetFieldValues", handle)
        assert gpu is not None
        gpu.physics.advance(self.clock())
        values = (_real.c_nvmlFieldValue_t * len(field_ids))()
        for i, fid in enumerate(field_ids):
            fid, scope = fid if isinstance(fid, tuple) else (fid, 0)
            values[i].fieldId, values[i].scopeId = fid, scope
            values[i].timestamp = int(self.clock() * 1e6)
            values[i].valueType = _real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            if fid in _FIELD_THROTTLE:
                ns = gpu.physics.integrals.throttle_ns.get(_FIELD_THROTTLE[fid], 0.0)
                values[i].value.ullVal = int(ns)
                values[i].nvmlReturn = _real.NVML_SUCCESS
            elif fid in _FIELD_ZERO:
                values[i].value.ullVal = 0
                values[i].nvmlReturn = _real.NVML_SUCCESS
            else:
                values[i].nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
        return values

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter: int) -> int:
        gpu = self._enter("nvmlDeviceGetTotalEccErrors", handle)
        assert gpu is not None
        if error_type == _real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return gpu.ecc_uncorrected
        return gpu.ecc_corrected

    def nvmlDeviceGetRemappedRows(self, handle: _Handle) -> tuple[int, int, int, int]:
        gpu = self._enter("nvmlDeviceGetRemappedRows", handle)
        assert gpu is not None
        return gpu.remapped

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[Any]:
        gpu = self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        assert gpu is not None
        if handle.mig is not None:
            return []
        out = []
        for pid, used in gpu.processes:
            info = _real.c_nvmlProcessInfo_v3_t()
            info.pid, info.usedGpuMemory = pid, used
            info.gpuInstanceId = info.computeInstanceId = 0xFFFFFFFF
            out.append(_real.nvmlStructToFriendlyObject(info))
        return out

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: _Handle) -> list[Any]:
        gpu = self._enter("nvmlDeviceGetMPSComputeRunningProcesses", handle)
        assert gpu is not None
        if handle.mig is not None:
            return []
        out = []
        for pid, used in gpu.mps_processes:
            info = _real.c_nvmlProcessInfo_v3_t()
            info.pid, info.usedGpuMemory = pid, used
            info.gpuInstanceId = info.computeInstanceId = 0xFFFFFFFF
            out.append(_real.nvmlStructToFriendlyObject(info))
        return out

    def sample(self, index: int) -> None:
        """Record the per-process samples of GPU ``index`` up to now at its current loads
        (what the driver does on its own, every sample period)."""
        gpu = self.gpus[index]
        now = self.clock()
        if gpu.sampled_until is None:
            gpu.sampled_until = now
            return
        period = PROCESS_SAMPLE_PERIOD
        t = gpu.sampled_until
        while t + period <= now + 1e-9:
            t += period
            stamp = round(t * 1e6)
            for pid, (sm, mem) in sorted(gpu.process_load.items()):
                sm_pct, mem_pct = round(sm * 100), round(mem * 100)
                if sm_pct > 0 or mem_pct > 0:
                    gpu.process_samples.append((stamp, pid, sm_pct, mem_pct))
        gpu.sampled_until = t
        del gpu.process_samples[:-PROCESS_SAMPLES_KEPT]

    def _process_rows(
        self, handle: _Handle, name: str, last_seen: int
    ) -> list[tuple[int, int, int, int]]:
        gpu = self._enter(name, handle)
        assert gpu is not None
        if handle.mig is not None:
            _raise(_real.NVML_ERROR_NOT_SUPPORTED)  # documented: not supported on MIG
        self.sample(gpu.index)
        rows = [row for row in gpu.process_samples if row[0] > last_seen]
        if not rows:
            _raise(_real.NVML_ERROR_NOT_FOUND)  # no process had utilization since last_seen
        return rows

    def nvmlDeviceGetProcessUtilization(self, handle: _Handle, timeStamp: int) -> list[Any]:
        out = []
        for stamp, pid, sm, mem in self._process_rows(
            handle, "nvmlDeviceGetProcessUtilization", timeStamp
        ):
            sample = _real.c_nvmlProcessUtilizationSample_t()
            sample.pid, sample.timeStamp, sample.smUtil, sample.memUtil = pid, stamp, sm, mem
            out.append(sample)
        return out

    def nvmlDeviceGetProcessesUtilizationInfo(self, handle: _Handle, timeStamp: int) -> list[Any]:
        out = []
        for stamp, pid, sm, mem in self._process_rows(
            handle, "nvmlDeviceGetProcessesUtilizationInfo", timeStamp
        ):
            info = _real.c_nvmlProcessUtilizationInfo_v1_t()
            info.pid, info.timeStamp, info.smUtil, info.memUtil = pid, stamp, sm, mem
            out.append(info)
        return out

    # -- GPM ---------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: _Handle) -> Any:
        gpu = self._enter("nvmlGpmQueryDeviceSupport", handle)
        assert gpu is not None
        support = _real.c_nvmlGpmSupport_t()
        support.version = _real.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = 1 if gpu.gpm_supported else 0
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        buffer = ctypes.create_string_buffer(16)
        address = ctypes.addressof(buffer)
        with self._lock:
            self._buffers[address] = buffer
            self._samples[address] = _GpmSampleData()
        return ctypes.cast(buffer, _real.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        address = _address(sample)
        with self._lock:
            if address not in self._samples:
                _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
            del self._samples[address]
            del self._buffers[address]

    def nvmlGpmSampleGet(self, handle: _Handle, sample: Any) -> Any:
        gpu = self._enter("nvmlGpmSampleGet", handle)
        assert gpu is not None
        if not gpu.gpm_supported:
            _raise(_real.NVML_ERROR_NOT_SUPPORTED)
        self._fill(gpu, sample, 1.0)
        return sample

    def nvmlGpmMigSampleGet(self, handle: _Handle, gpu_instance_id: int, sample: Any) -> Any:
        gpu = self._enter("nvmlGpmMigSampleGet", handle)
        assert gpu is not None
        share = next((m for m in gpu.mig if m.gpu_instance_id == gpu_instance_id), None)
        if share is None:
            _raise(_real.NVML_ERROR_NOT_FOUND)
        self._fill(gpu, sample, 1.0)
        return sample

    def _fill(self, gpu: FakeGpu, sample: Any, share: float) -> None:
        now = self.clock()
        gpu.physics.advance(now)
        data = self._samples.get(_address(sample))
        if data is None:
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        assert data is not None
        data.t = now
        data.ratios = {k: v * share for k, v in gpu.physics.integrals.ratios.items()}
        data.filled = True

    def nvmlGpmMetricsGet(self, metrics_get: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        s1 = self._samples.get(_address(metrics_get.sample1))
        s2 = self._samples.get(_address(metrics_get.sample2))
        if s1 is None or s2 is None or s1 is s2 or not (s1.filled and s2.filled):
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        assert s1 is not None and s2 is not None
        dt = s2.t - s1.t
        for i in range(metrics_get.numMetrics):
            metric = metrics_get.metrics[i]
            mapping = _GPM_RATIOS.get(int(metric.metricId))
            if mapping is None:
                metric.nvmlReturn = _real.NVML_ERROR_INVALID_ARGUMENT
                continue
            name, scale = mapping
            metric.nvmlReturn = _real.NVML_SUCCESS
            if dt <= 0:
                metric.value = float("nan")
            else:
                metric.value = (s2.ratios[name] - s1.ratios[name]) / dt * scale
        return metrics_get

    # -- events ------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> _EventSet:
        self._enter("nvmlEventSetCreate")
        es = _EventSet()
        self._event_sets.append(es)
        return es

    def nvmlDeviceGetSupportedEventTypes(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetSupportedEventTypes", handle)
        return 0xFF9F

    def nvmlDeviceRegisterEvents(self, handle: _Handle, mask: int, event_set: _EventSet) -> None:
        self._enter("nvmlDeviceRegisterEvents", handle)
        event_set.registered[handle.gpu.index] = (handle, mask)

    def nvmlEventSetWait_v2(self, event_set: _EventSet, timeout_ms: int) -> Any:
        self._enter("nvmlEventSetWait_v2")
        for gpu in self.gpus:
            self._is_lost(gpu)  # a loss is announced as an XID the moment it happens
        try:
            handle, event_type, xid = event_set.queue.get(timeout=timeout_ms / 1000.0)
        except queue.Empty:
            _raise(_real.NVML_ERROR_TIMEOUT)
        data = _real.c_nvmlEventData_t()
        data.eventType, data.eventData = event_type, xid
        data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF
        return _EventData(handle, data)

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        self._enter("nvmlEventSetFree")
        if event_set in self._event_sets:
            self._event_sets.remove(event_set)

    # -- test helpers --------------------------------------------------------------------------
    def inject_xid(self, index: int, xid: int) -> None:
        """Deliver an XID event for GPU ``index`` to every registered event set."""
        for es in self._event_sets:
            reg = es.registered.get(index)
            if reg:
                es.queue.put((reg[0], _real.nvmlEventTypeXidCriticalError, xid))


class _EventData:
    """``c_nvmlEventData_t`` with the device handle the caller can compare with its own."""

    def __init__(self, handle: _Handle, data: Any) -> None:
        self.device = handle
        self.eventType = data.eventType
        self.eventData = data.eventData
        self.gpuInstanceId = data.gpuInstanceId
        self.computeInstanceId = data.computeInstanceId


def _address(sample: Any) -> int:
    return ctypes.cast(sample, ctypes.c_void_p).value or 0


def simulated_node(
    clock: Callable[[], float] = time.monotonic,
    gpus: int | None = None,
    spec: GpuSpec | None = None,
) -> FakeNvml:
    """The built-in simulated node: GPU i runs workload i of :data:`patterns.NODE` (one GPU
    per workload unless ``gpus`` says otherwise)."""
    from exporter.sim.patterns import NODE

    gpus = len(NODE) if gpus is None else gpus
    start = clock()
    fakes = []
    for index in range(gpus):
        workload = NODE[index % len(NODE)]
        pattern: Pattern = workload.pattern
        fakes.append(
            FakeGpu(
                index=index,
                physics=GpuPhysics(pattern, spec, start=start),
                processes=list(workload.processes),
                lost_after=workload.lost_after,
            )
        )
    return FakeNvml(fakes, clock=clock)
