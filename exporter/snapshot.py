"""Immutable snapshots of what the sources last read, and the model's last verdicts.

Every source publishes one :class:`SourceResult` per poll, carrying typed readings
(``exporter/readings.py``). The :class:`SnapshotStore` swaps in a new :class:`Snapshot` that
shares every other source's last result, so readers (the exposition, the efficiency model,
``/debug/state``) see a consistent picture without locks and never call into hardware.

Data flows one way: sources -> snapshot -> model -> verdicts in the next snapshot ->
exposition. The model is not a source: the scheduler runs it after each GPU poll and
publishes its :class:`~exporter.readings.NodeVerdicts` with :meth:`SnapshotStore.publish_verdicts`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any, TypeVar

import structlog

from exporter.readings import (
    Availability,
    Device,
    GpuReading,
    GpuState,
    NodeVerdicts,
    PodAssignments,
    PodJobs,
    ProcessInfo,
    ProfilingReading,
    ProfilingStatus,
)

__all__ = ["Device", "ProcessInfo", "Snapshot", "SnapshotStore", "SourceResult"]

R = TypeVar("R")


@dataclass(frozen=True)
class SourceResult:
    """Everything one poll of one source produced.

    ``ok`` false with ``error`` (a one-line message) and ``reason`` (a short snake_case code)
    means the poll as a whole failed; partial failures (one GPU lost, one metric unsupported)
    live in the typed reading and are counted in ``errors`` (reason -> count), which feeds
    ``goodput_exporter_source_errors_total``. The reading's type says what was read: readers
    look it up by type (:meth:`Snapshot.get`), so a new kind of source adds no field here.
    """

    source: str
    timestamp: float = field(default_factory=time.time)
    duration_seconds: float = 0.0
    ok: bool = True
    error: str = ""
    reason: str = ""
    errors: Mapping[str, int] = field(default_factory=dict)
    reading: object = None
    """The source's one typed reading (``exporter/readings.py``), None when it read nothing."""
    stuck_reads: int | None = None
    """Reads the source gave up on that are still stuck in the kernel (None: a source that
    never abandons a read); ``goodput_exporter_source_reads_stuck``."""
    availability: tuple[Availability, ...] = ()

    def get(self, kind: type[R]) -> R | None:
        """The reading if it is a ``kind``."""
        return self.reading if isinstance(self.reading, kind) else None


@dataclass(frozen=True)
class Snapshot:
    """The latest result of every source, the model's verdicts, and a version that grows
    with each publish."""

    node_name: str
    results: Mapping[str, SourceResult] = field(default_factory=dict)
    verdicts: NodeVerdicts = field(default_factory=NodeVerdicts)
    version: int = 0
    ready_reason: str = "no GPU source has completed a poll yet"
    profiling_order: tuple[str, ...] = ()
    """Backends in order of preference, for choosing one per GPU when several answer."""

    # typed views across sources -----------------------------------------------------------
    def get(self, kind: type[R]) -> R | None:
        """The first published reading of type ``kind`` (one source owns each kind)."""
        for result in self.results.values():
            if isinstance(result.reading, kind):
                return result.reading
        return None

    def all(self, kind: type[R]) -> tuple[R, ...]:
        """Every published reading of type ``kind`` (profiling backends share one kind)."""
        return tuple(r.reading for r in self.results.values() if isinstance(r.reading, kind))

    def stamp(self, kind: type[object]) -> float | None:
        """When the reading of type ``kind`` was taken, None before the first."""
        return next(
            (r.timestamp for r in self.results.values() if isinstance(r.reading, kind)), None
        )

    # The joined views are computed once per snapshot (it never changes), on first read.
    @cached_property
    def inventory(self) -> tuple[Device, ...]:
        """Devices of every GPU source (NVML, ...), empty before their first poll."""
        readings = self.all(GpuReading)
        if len(readings) == 1:
            return readings[0].inventory
        return tuple(d for r in readings for d in r.inventory)

    @cached_property
    def gpu_states(self) -> Mapping[str, GpuState]:
        """Every GPU source's state per ``gpu`` label."""
        readings = self.all(GpuReading)
        if len(readings) == 1:
            return readings[0].gpus
        return MappingProxyType({gpu: state for r in readings for gpu, state in r.gpus.items()})

    @cached_property
    def processes(self) -> tuple[ProcessInfo, ...]:
        return tuple(p for state in self.gpu_states.values() for p in state.processes)

    def profiling(self, gpu: str) -> ProfilingStatus | None:
        """The profiling status that speaks for ``gpu``: the first available backend in
        preference order, else the first that said why it is not."""
        found = list(self.profiling_rows(gpu))
        if not found:
            return None
        order = {name: i for i, name in enumerate(self.profiling_order)}
        found.sort(key=lambda s: (not s.available, order.get(s.backend, len(order))))
        return found[0]

    def profiling_rows(self, gpu: str) -> tuple[ProfilingStatus, ...]:
        """Every backend's status on ``gpu`` (for the availability family)."""
        return tuple(r.gpus[gpu] for r in self.all(ProfilingReading) if gpu in r.gpus)

    @property
    def pods(self) -> PodAssignments:
        """The kubelet's assignments (empty before its first answer), with job names."""
        known = self.pods_known
        return PodAssignments() if known is None else known

    @cached_property
    def pods_known(self) -> PodAssignments | None:
        """The kubelet's assignments joined with the pods' job names, or None until the
        kubelet has answered once (so nothing reads "no pods" into a kubelet not yet asked)."""
        pods = self.get(PodAssignments)
        return None if pods is None else _with_jobs(pods, self.get(PodJobs))

    @property
    def availability(self) -> tuple[Availability, ...]:
        return tuple(a for r in self.results.values() for a in r.availability)

    def result(self, source: str) -> SourceResult | None:
        return self.results.get(source)

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON view for ``/debug/state``."""
        return {
            "node": self.node_name,
            "version": self.version,
            "ready_reason": self.ready_reason,
            "sources": {name: _result_json(r) for name, r in self.results.items()},
            "verdicts": _plain(self.verdicts),
        }


def _result_json(result: SourceResult) -> dict[str, Any]:
    """A result's fields with its reading's fields inline, and the reading's type named."""
    out: dict[str, Any] = _plain(replace(result, reading=None))
    reading = result.reading
    out["reading"] = None if reading is None else type(reading).__name__
    if reading is not None:
        plain = _plain(reading)
        out.update(plain if isinstance(plain, dict) else {"value": plain})
    return out


def _plain(value: Any) -> Any:
    """Dataclasses, mappings and tuples to JSON-ready values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {_key(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _key(key: object) -> str:
    """A JSON object key; tuple keys (namespace, pod) read as ``namespace/pod``."""
    return "/".join(map(str, key)) if isinstance(key, tuple) else str(key)


Listener = Callable[[Snapshot], None]
_log = structlog.get_logger("snapshot")


class SnapshotStore:
    """Holds the current :class:`Snapshot`; publishing swaps it atomically.

    Writers (source tasks, the model) serialise on a lock; readers just take ``current``, a
    plain attribute read, so a scrape never waits on a poll. Listeners (the exposition
    encoder) are told of every new snapshot after the swap.
    """

    def __init__(
        self,
        node_name: str,
        ready_sources: Iterable[str] = (),
        profiling_order: Iterable[str] = (),
    ) -> None:
        self._lock = threading.Lock()
        self._ready_sources = frozenset(ready_sources)
        self._current = Snapshot(node_name=node_name, profiling_order=tuple(profiling_order))
        if not self._ready_sources:  # nothing to wait for
            self._current = replace(self._current, ready_reason="")
        self._listeners: list[Listener] = []

    def wait_for(self, sources: Iterable[str]) -> None:
        """Be ready once one of ``sources`` has listed GPUs (set by the daemon before any
        source runs: the sources that declare ``starts_first``)."""
        self._ready_sources = frozenset(sources)
        reason = Snapshot.ready_reason if self._ready_sources else ""
        self._current = replace(self._current, ready_reason=reason)

    @property
    def current(self) -> Snapshot:
        return self._current

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def publish(self, result: SourceResult) -> Snapshot:
        with self._lock:
            old = self._current
            results = dict(old.results)
            results[result.source] = result
            reason = old.ready_reason
            if reason and result.source in self._ready_sources:
                if result.ok and _has_gpus(result.reading):
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
        self._notify(new)
        return new

    def publish_verdicts(self, verdicts: NodeVerdicts) -> Snapshot:
        with self._lock:
            new = replace(self._current, verdicts=verdicts, version=self._current.version + 1)
            self._current = new
        self._notify(new)
        return new

    def _notify(self, snapshot: Snapshot) -> None:
        """Tell every listener; one that raises is logged and skipped, never the publisher's
        problem (a poll task that died here would stop its source for good)."""
        for listener in self._listeners:
            try:
                listener(snapshot)
            except Exception as exc:
                _log.error("snapshot_listener_failed", error=f"{type(exc).__name__}: {exc}")


def _with_jobs(pods: PodAssignments, jobs: PodJobs | None) -> PodAssignments:
    """Fill each container's job from the pod labels (joined by namespace and pod here, at
    read time, so a new pod gets its job as soon as either source has seen it)."""
    if jobs is None or not jobs.jobs:
        return pods
    names = jobs.jobs
    return PodAssignments(
        tuple(replace(c, job=names.get((c.namespace, c.pod), c.job)) for c in pods.containers)
    )


def _has_gpus(reading: object) -> bool:
    """Whether a GPU source's reading lists at least one GPU (what readiness waits for)."""
    return isinstance(reading, (GpuReading, ProfilingReading)) and bool(
        getattr(reading, "inventory", None) or reading.gpus
    )
