"""One NVML library session: init, device discovery (GPUs and MIG instances), shutdown.

The session takes the NVML module as a parameter: the real ``pynvml`` from nvidia-ml-py on a
GPU node, or the simulated node's drop-in (``exporter.sim.fake_nvml``). Sources share one
session, so they agree on handles and on the ``gpu`` label of each device.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from exporter.readings import Device
from exporter.settings import devices
from exporter.settings.core import CoreSettings
from exporter.snapshot import SourceResult
from exporter.sources.base import BlockingSource
from exporter.sources.links import link_peaks

log = structlog.get_logger("nvml")


class NvmlUnavailable(Exception):
    """NVML cannot be initialised (no library, no driver); the message says why."""


@dataclass(frozen=True)
class DeviceHandle:
    device: Device
    handle: Any
    parent_handle: Any = None  # MIG: the parent GPU's handle (GPM takes parent + GI id)
    gpu_instance_id: int | None = None


def error_reason(nvml: Any, exc: BaseException) -> str:
    """A short snake_case reason code for an NVML error (``gpu_lost``, ``not_supported``...)."""
    value = getattr(exc, "value", None)
    codes = {
        getattr(nvml, "NVML_ERROR_GPU_IS_LOST", -1): "gpu_lost",
        getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", -1): "not_supported",
        getattr(nvml, "NVML_ERROR_NO_PERMISSION", -1): "no_permission",
        getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", -1): "function_not_found",
        getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", -1): "library_not_found",
        getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", -1): "driver_not_loaded",
        getattr(nvml, "NVML_ERROR_TIMEOUT", -1): "timeout",
        getattr(nvml, "NVML_ERROR_NOT_FOUND", -1): "not_found",
        getattr(nvml, "NVML_ERROR_RESET_REQUIRED", -1): "reset_required",
        getattr(nvml, "NVML_ERROR_UNINITIALIZED", -1): "uninitialized",
        getattr(nvml, "NVML_ERROR_INVALID_ARGUMENT", -1): "invalid_argument",
        getattr(nvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", -1): "version_mismatch",
        getattr(nvml, "NVML_ERROR_NO_DATA", -1): "no_data",
    }
    if value in codes:
        return codes[value]
    if type(exc).__name__ == "NVMLLibraryMismatchError":
        return "version_mismatch"
    return "error"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSession:
    """Owns ``nvmlInit``/``nvmlShutdown`` and the device list."""

    def __init__(self, nvml: Any, backend: str = "nvml", select: Sequence[str] = ()) -> None:
        self.nvml = nvml
        self.backend = backend
        self.select = tuple(select)  # the GPUs this daemon owns (``devices``); () for all
        self.devices: list[DeviceHandle] = []
        self.driver_version = ""
        self._lock = threading.Lock()
        self._refs = 0

    @classmethod
    def open_for(cls, settings: CoreSettings) -> NvmlSession:
        """The session the sources share, opened (raises :class:`NvmlUnavailable`).

        With ``simulate`` it runs on the built-in simulated node, a pynvml drop-in, so every
        source runs the same code it runs on a GPU node."""
        nvml: Any
        if settings.simulate:
            from exporter.sim.fake_nvml import simulated_node

            nvml, backend = simulated_node(gpus=settings.simulate_gpus), "simulated"
        else:
            import pynvml

            nvml, backend = pynvml, "nvml"
        session = cls(nvml, backend, settings.devices)
        session.open()
        return session

    def open(self) -> None:
        """Initialise once for all sources sharing the session (reference counted)."""
        with self._lock:
            if self._refs == 0:
                self._init()
            self._refs += 1

    def close(self) -> None:
        with self._lock:
            self._refs -= 1
            if self._refs == 0:
                try:
                    self.nvml.nvmlShutdown()
                except Exception as exc:
                    log.warning("nvml_shutdown_failed", error=str(exc))

    def _init(self) -> None:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML init failed: {exc} ({error_reason(nvml, exc)})") from exc
        try:
            self.driver_version = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError:
            self.driver_version = ""
        try:
            self.devices = devices.select(self._discover(), self.select)
        except nvml.NVMLError as exc:  # e.g. nvmlDeviceGetCount fails on a broken driver
            nvml.nvmlShutdown()
            raise NvmlUnavailable(
                f"NVML device discovery failed: {exc} ({error_reason(nvml, exc)})"
            ) from exc
        except devices.DeviceSelectionError:
            nvml.nvmlShutdown()
            raise
        log.debug(  # the start-up line ("started") says how many GPUs
            "nvml_ready",
            backend=self.backend,
            driver_version=self.driver_version,
            devices=len(self.devices),
        )

    def _discover(self) -> list[DeviceHandle]:
        nvml = self.nvml
        found: list[DeviceHandle] = []
        count = nvml.nvmlDeviceGetCount()
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                device = self._describe(handle, str(index))
            except nvml.NVMLError as exc:
                # A GPU that fails at discovery still gets a row, so it shows up as down.
                log.error(
                    "gpu_discovery_failed",
                    gpu=str(index),
                    reason=error_reason(nvml, exc),
                    error=str(exc),
                )
                found.append(DeviceHandle(Device(gpu=str(index), uuid=""), None))
                continue
            found.append(DeviceHandle(device, handle))
            found.extend(self._discover_mig(handle, device))
        return found

    def _describe(self, handle: Any, gpu: str, **mig: str) -> Device:
        nvml = self.nvml
        try:
            pci = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        except nvml.NVMLError:
            pci = ""
        return Device(
            gpu=gpu,
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            name=_text(nvml.nvmlDeviceGetName(handle)),
            pci_bus_id=pci,
            driver_version=self.driver_version,
            link_peaks=() if mig else link_peaks(nvml, handle),
            **mig,
        )

    def _discover_mig(self, handle: Any, parent: Device) -> list[DeviceHandle]:
        nvml = self.nvml
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError:
            return []  # NOT_SUPPORTED on GPUs without MIG
        if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return []
        out: list[DeviceHandle] = []
        for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError:
                continue  # empty slot: NOT_FOUND
            try:
                gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
                ci = int(nvml.nvmlDeviceGetComputeInstanceId(mig))
                device = self._describe(
                    mig,
                    f"{parent.gpu}-{gi}",
                    parent_uuid=parent.uuid,
                    gpu_instance_id=str(gi),
                    compute_instance_id=str(ci),
                )
                device = replace(
                    device,
                    pci_bus_id=parent.pci_bus_id,
                    link_peaks=parent.link_peaks,
                    mig_profile=mig_profile(device.name),
                )
            except nvml.NVMLError as exc:
                log.error("mig_discovery_failed", gpu=parent.gpu, slot=slot, error=str(exc))
                continue
            out.append(DeviceHandle(device, mig, parent_handle=handle, gpu_instance_id=gi))
        return out


_MIG_NAME = re.compile(r"\bMIG\s+(\S+)\s*$")


def mig_profile(name: str) -> str:
    """The profile of a MIG device from its NVML name (``NVIDIA H100 80GB HBM3 MIG 1g.10gb``
    -> ``1g.10gb``): NVML names MIG devices after their GPU instance profile."""
    match = _MIG_NAME.search(name)
    return match.group(1) if match else ""


class SessionSource(BlockingSource):
    """A blocking source that reads through a shared :class:`NvmlSession`.

    It opens the session on its first poll (and keeps trying on later polls while NVML cannot
    be initialised, reporting ``nvml_unavailable``), and releases it on shutdown. Subclasses
    implement :meth:`poll_session` and may extend :meth:`open` / :meth:`shutdown`.
    """

    def __init__(self, session: NvmlSession, interval: float = 1.0) -> None:
        self.interval = interval
        super().__init__()
        self.session = session
        self._opened = False

    def open(self) -> None:
        self.session.open()
        self._opened = True

    def shutdown(self) -> None:
        if self._opened:
            self.session.close()
            self._opened = False

    def poll_blocking(self) -> SourceResult:
        if not self._opened:
            try:
                self.open()
            except NvmlUnavailable as exc:
                return SourceResult(
                    source=self.name, ok=False, reason="nvml_unavailable", error=str(exc)
                )
        return self.poll_session()

    def poll_session(self) -> SourceResult:
        raise NotImplementedError
