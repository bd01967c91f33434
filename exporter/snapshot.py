"""Immutable snapshots of what the sources last read.

Every source publishes one :class:`SourceResult` per poll. The :class:`SnapshotStore` swaps
in a new :class:`Snapshot` that shares every other source's last result, so readers (the
``/metrics`` renderer, the efficiency model, ``/debug/state``) see a consistent picture
without locks and without ever calling into hardware themselves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

Labels = tuple[tuple[str, str], ...]
"""Extra labels of a sample, beyond the per-device base labels, as sorted pairs."""


def labels(**kv: str) -> Labels:
    """Build a :data:`Labels` tuple in a stable order."""
    return tuple(sorted(kv.items()))


@dataclass(frozen=True, slots=True)
class Device:
    """Identity of one GPU or MIG instance.

    ``gpu`` is the value of the ``gpu`` label: the NVML index as a string for a whole GPU,
    ``"<parent index>-<gpu instance id>"`` for a MIG instance (the key dcgm-exporter uses).
    """

    gpu: str
    uuid: str
    name: str = ""
    pci_bus_id: str = ""
    driver_version: str = ""
    parent_uuid: str = ""
    gpu_instance_id: str = ""
    compute_instance_id: str = ""
    mig_profile: str = ""

    @property
    def is_mig(self) -> bool:
        return bool(self.parent_uuid)


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of one metric family (named as in the catalog) for one device or the node."""

    name: str
    value: float
    labels: Labels = ()


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """A compute process NVML lists on a device; kept for pod and serving attribution."""

    gpu: str
    pid: int
    used_memory_bytes: int | None = None


@dataclass(frozen=True)
class SourceResult:
    """Everything one poll of one source produced.

    ``ok`` false with ``error`` (a one-line message) and ``reason`` (a short snake_case code)
    means the poll as a whole failed; partial failures (one GPU lost, one metric unsupported)
    are expressed by samples such as ``goodput_gpu_up`` and counted in ``errors`` (reason code
    to count), which feeds ``goodput_exporter_source_errors_total``.
    ``devices`` maps a ``gpu`` label to that device's samples; ``node`` holds samples that
    carry no device labels (serving targets, source status). ``inventory`` is set by the
    source that discovers devices; ``device_labels`` by sources that attribute devices to
    workloads (Kubernetes); ``extra`` carries typed payloads for other stages.
    """

    source: str
    timestamp: float = field(default_factory=time.time)
    duration_seconds: float = 0.0
    ok: bool = True
    error: str = ""
    reason: str = ""
    errors: Mapping[str, int] = field(default_factory=dict)
    devices: Mapping[str, tuple[Sample, ...]] = field(default_factory=dict)
    node: tuple[Sample, ...] = ()
    inventory: tuple[Device, ...] | None = None
    processes: tuple[ProcessInfo, ...] | None = None
    device_labels: Mapping[str, Labels] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def device_samples(self, gpu: str) -> tuple[Sample, ...]:
        return self.devices.get(gpu, ())


@dataclass(frozen=True)
class Snapshot:
    """The latest result of every source, plus a version that grows with each publish."""

    node_name: str
    results: Mapping[str, SourceResult] = field(default_factory=dict)
    version: int = 0
    ready_reason: str = "no GPU source has completed a poll yet"

    @property
    def inventory(self) -> tuple[Device, ...]:
        """Devices as discovered by whichever source owns discovery (the first that has one)."""
        for result in self.results.values():
            if result.inventory is not None:
                return result.inventory
        return ()

    @property
    def processes(self) -> tuple[ProcessInfo, ...]:
        out: list[ProcessInfo] = []
        for result in self.results.values():
            if result.processes:
                out.extend(result.processes)
        return tuple(out)

    @property
    def device_labels(self) -> Mapping[str, Labels]:
        merged: dict[str, Labels] = {}
        for result in self.results.values():
            if result.device_labels:
                merged.update(result.device_labels)
        return merged

    def device_samples(self, gpu: str) -> Iterator[Sample]:
        for result in self.results.values():
            yield from result.device_samples(gpu)

    def value(self, gpu: str, name: str, match: Labels = ()) -> float | None:
        """The value of metric ``name`` on device ``gpu`` whose labels include ``match``."""
        wanted = set(match)
        for sample in self.device_samples(gpu):
            if sample.name == name and wanted.issubset(sample.labels):
                return sample.value
        return None

    def values(self, gpu: str, name: str) -> list[Sample]:
        return [s for s in self.device_samples(gpu) if s.name == name]

    def result(self, source: str) -> SourceResult | None:
        return self.results.get(source)

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON view for ``/debug/state``."""
        return {
            "node": self.node_name,
            "version": self.version,
            "inventory": [_device_json(d) for d in self.inventory],
            "sources": {name: _result_json(r) for name, r in self.results.items()},
        }


def _device_json(device: Device) -> dict[str, Any]:
    return {k: getattr(device, k) for k in Device.__slots__}


def _samples_json(samples: Iterable[Sample]) -> list[dict[str, Any]]:
    return [{"name": s.name, "value": s.value, "labels": dict(s.labels)} for s in samples]


def _result_json(result: SourceResult) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "error": result.error,
        "timestamp": result.timestamp,
        "duration_seconds": result.duration_seconds,
        "devices": {gpu: _samples_json(s) for gpu, s in result.devices.items()},
        "node": _samples_json(result.node),
        "processes": [
            {"gpu": p.gpu, "pid": p.pid, "used_memory_bytes": p.used_memory_bytes}
            for p in result.processes or ()
        ],
        "device_labels": {k: dict(v) for k, v in (result.device_labels or {}).items()},
    }


class SnapshotStore:
    """Holds the current :class:`Snapshot`; publishing swaps it atomically.

    Writers (source tasks) serialise on a lock; readers just take ``current``, a plain
    attribute read, so a scrape never waits on a poll.
    """

    def __init__(self, node_name: str, ready_sources: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._ready_sources = frozenset(ready_sources)
        self._current = Snapshot(node_name=node_name)
        self._listeners: list[Any] = []

    @property
    def current(self) -> Snapshot:
        return self._current

    def publish(self, result: SourceResult) -> Snapshot:
        with self._lock:
            old = self._current
            results = dict(old.results)
            results[result.source] = result
            reason = old.ready_reason
            if reason and result.source in self._ready_sources:
                if result.ok and result.inventory:
                    reason = ""
                elif not result.ok:
                    reason = f"source {result.source}: {result.error}"
            new = replace(
                old,
                results=MappingProxyType(results),
                version=old.version + 1,
                ready_reason=reason,
            )
            self._current = new
        return new
