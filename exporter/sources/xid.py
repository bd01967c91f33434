"""XID source: critical-error events counted per GPU and XID code.

NVML only reports events that happen after registration, so a dedicated thread registers at
start and waits on the event set with a short timeout (to notice shutdown); the poll just
publishes the counts so far. Counters, not a last-value gauge: a gauge loses every XID but
the latest between two scrapes.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Mapping
from typing import Any

import structlog

from exporter.metrics.families import GpuFamilies, by_label, gauge
from exporter.readings import XidReading, XidState
from exporter.snapshot import SourceResult
from exporter.sources.nvml_session import NvmlSession, SessionSource, error_reason

log = structlog.get_logger("xid")

SOURCE = "xid"
WAIT_MS = 1000


def _handle_key(handle: Any) -> int:
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value or id(handle)
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


class XidSource(SessionSource):
    name = SOURCE

    def __init__(self, session: NvmlSession, interval: float = 1.0) -> None:
        super().__init__(session, interval)
        self._counts: dict[str, dict[int, int]] = {}
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error = ""
        self._reason = ""
        self._event_set: Any = None
        self._by_handle: dict[int, str] = {}

    def open(self) -> None:
        super().open()
        nvml = self.session.nvml
        try:
            self._event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            self._reason, self._error = error_reason(nvml, exc), f"event set: {exc}"
            return
        registered = 0
        for dh in self.session.devices:
            if dh.handle is None or dh.device.is_mig:
                continue  # MIG handles do not support event registration
            self._counts.setdefault(dh.device.gpu, {})
            try:
                nvml.nvmlDeviceRegisterEvents(
                    dh.handle, nvml.nvmlEventTypeXidCriticalError, self._event_set
                )
            except nvml.NVMLError as exc:
                log.warning(
                    "xid_register_failed", gpu=dh.device.gpu, reason=error_reason(nvml, exc)
                )
                continue
            self._by_handle[_handle_key(dh.handle)] = dh.device.gpu
            registered += 1
        log.debug("xid_watch_started", gpus=registered)
        self._thread = threading.Thread(target=self._watch, name="xid-events", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        nvml = self.session.nvml
        while not self._stop.is_set():
            try:
                event = nvml.nvmlEventSetWait_v2(self._event_set, WAIT_MS)
            except nvml.NVMLError as exc:
                if error_reason(nvml, exc) == "timeout":
                    continue
                with self._lock:
                    self._reason, self._error = error_reason(nvml, exc), str(exc)
                log.error("xid_wait_failed", reason=self._reason, error=self._error)
                self._stop.wait(5.0)
                continue
            gpu = self._by_handle.get(_handle_key(event.device), "")
            xid = int(event.eventData)
            with self._lock:
                per_gpu = self._counts.setdefault(gpu, {})
                per_gpu[xid] = per_gpu.get(xid, 0) + 1
                self._last[gpu] = xid
            log.error("xid_event", gpu=gpu, xid=xid)

    def poll_session(self) -> SourceResult:
        with self._lock:
            if self._error and self._thread is None:
                return SourceResult(source=SOURCE, ok=False, reason=self._reason, error=self._error)
            states = {
                gpu: XidState(counts=tuple(sorted(counts.items())), last=self._last.get(gpu, 0))
                for gpu, counts in self._counts.items()
                if gpu
            }
        return SourceResult(source=SOURCE, reading=XidReading(states))

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT_MS / 1000.0 + 1.0)
        if self._event_set is not None:
            with contextlib.suppress(Exception):
                self.session.nvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
        super().shutdown()


def _states(reading: XidReading | None) -> Mapping[str, XidState]:
    return {} if reading is None else reading.gpus


FAMILIES = GpuFamilies[XidState](
    SOURCE,
    lambda snap: _states(snap.get(XidReading)),
    (
        by_label(
            "goodput_gpu_xid_errors_total",
            "counter",
            "XID critical-error events since the exporter started, by XID code.",
            "xid",
            lambda s: ((str(code), float(n)) for code, n in s.counts),
        ),
        gauge(
            "goodput_gpu_last_xid",
            "Code of the most recent XID event on this GPU (0 if none since start).",
            lambda s: float(s.last),
            default=False,
        ),
    ),
)
