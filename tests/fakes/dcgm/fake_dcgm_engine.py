"""The host engine behind the fake ``dcgm_agent``: GPUs, groups, watches and failure switches.

Tests replace ``ENGINE`` with a fresh :class:`FakeHostEngine` and flip its switches:
``running`` (host engine gone), ``module_loaded`` (profiling module), ``root`` (engine not
root / no SYS_ADMIN), ``locked`` (another profiler holds the counters), ``paused`` (watch
accepted but values blank), ``max_fields`` (multi-pass refusal above N fields),
``cumulative`` (DCGM >= 4.6 counters), ``library_present`` (libdcgm.so.4).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import dcgm_structs as S
import dcgmvalue as V

PROFILING_FIELDS = frozenset(range(1001, 1100))
INT_FIELDS = frozenset({1009, 1010, 1011, 1012, *range(1084, 1097)})
CUMULATIVE = frozenset(range(1084, 1097))


@dataclass
class FakeGpu:
    gpu_id: int
    uuid: str
    values: dict[int, float] = field(default_factory=dict)
    profiling: bool = True  # False: PROFILING_NOT_SUPPORTED (GeForce, Pascal, ...)
    unsupported_fields: frozenset[int] = frozenset()
    denied: bool = False  # values read back as NOT_PERMISSIONED blanks


@dataclass
class FakeHostEngine:
    gpus: list[FakeGpu] = field(default_factory=list)
    running: bool = True
    library_present: bool = True
    module_loaded: bool = True
    root: bool = True
    locked: bool = False
    paused: bool = False
    max_fields: int | None = None
    cumulative: bool = False
    ts_us: int = 1_000_000_000
    generation: int = 0
    calls: list[tuple[object, ...]] = field(default_factory=list)
    handles: dict[int, int] = field(default_factory=dict)  # handle -> generation
    groups: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    field_groups: dict[int, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    watches: dict[int, set[int]] = field(default_factory=dict)  # group -> field ids
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    # controls --------------------------------------------------------------------------------
    def advance(self, seconds: float = 1.0) -> None:
        """DCGM samples once more; counters grow by one second's worth."""
        self.ts_us += int(seconds * 1e6)
        for gpu in self.gpus:
            for field_id in CUMULATIVE:
                gpu.values[field_id] = gpu.values.get(field_id, 0.0) + 1000.0 * seconds * (
                    {1084: 1.0, 1085: 0.5, 1086: 0.25, 1091: 1e6, 1092: 2e6}.get(field_id, 0.0)
                )

    def restart(self) -> None:
        """The host engine restarts: every handle, group and watch is gone."""
        self.generation += 1
        self.groups.clear()
        self.field_groups.clear()
        self.watches.clear()

    def watched_fields(self, gpu_id: int) -> set[int]:
        out: set[int] = set()
        for group, entities in self.groups.items():
            if any(eid == gpu_id for _, eid in entities):
                out |= self.watches.get(group, set())
        return out

    # used by dcgm_agent ------------------------------------------------------------------------
    def connect(self) -> int:
        if not self.running:
            raise S.DCGMError(S.DCGM_ST_CONNECTION_NOT_VALID)
        handle = next(self._ids)
        self.handles[handle] = self.generation
        return handle

    def check(self, handle: object) -> None:
        key = getattr(handle, "value", handle)
        if not self.running or self.handles.get(key) != self.generation:  # type: ignore[arg-type]
            raise S.DCGMError(S.DCGM_ST_CONNECTION_NOT_VALID)

    def gpu(self, gpu_id: int) -> FakeGpu:
        for gpu in self.gpus:
            if gpu.gpu_id == gpu_id:
                return gpu
        raise S.DCGMError(S.DCGM_ST_BADPARAM)

    def watch(self, group: int, field_group: int) -> None:
        if group not in self.groups or field_group not in self.field_groups:
            raise S.DCGMError(S.DCGM_ST_BADPARAM)
        ids = self.field_groups[field_group][1]
        prof = [f for f in ids if f in PROFILING_FIELDS]
        if prof:
            if not self.module_loaded:
                raise S.DCGMError(S.DCGM_ST_MODULE_NOT_LOADED)
            if not self.root:
                raise S.DCGMError(S.DCGM_ST_REQUIRES_ROOT)
            for _, gpu_id in self.groups[group]:
                gpu = self.gpu(gpu_id)
                if not gpu.profiling:
                    raise S.DCGMError(S.DCGM_ST_PROFILING_NOT_SUPPORTED)
                if any(f in gpu.unsupported_fields for f in prof):
                    raise S.DCGMError(S.DCGM_ST_NOT_SUPPORTED)
            if not self.cumulative and any(f in CUMULATIVE for f in prof):
                raise S.DCGMError(S.DCGM_ST_NOT_SUPPORTED)
            if self.locked:
                raise S.DCGMError(S.DCGM_ST_PROFILING_LIBRARY_ERROR)
            if self.max_fields is not None and len(prof) > self.max_fields:
                raise S.DCGMError(S.DCGM_ST_PROFILING_MULTI_PASS)
        self.watches.setdefault(group, set()).update(ids)

    def latest(self, gpu_id: int, field_id: int) -> tuple[int, int, float]:
        """(status, type char code, value) of one field on one GPU."""
        kind = "i" if field_id in INT_FIELDS else "d"
        blank = V.DCGM_INT64_BLANK if kind == "i" else V.DCGM_FP64_BLANK
        if field_id not in self.watched_fields(gpu_id):
            return S.DCGM_ST_NOT_WATCHED, ord(kind), blank
        gpu = self.gpu(gpu_id)
        if gpu.denied:
            denied = V.DCGM_INT64_NOT_PERMISSIONED if kind == "i" else V.DCGM_FP64_NOT_PERMISSIONED
            return S.DCGM_ST_OK, ord(kind), denied
        if self.paused or self.locked:
            return S.DCGM_ST_OK, ord(kind), blank
        return S.DCGM_ST_OK, ord(kind), gpu.values.get(field_id, 0.0)


ENGINE = FakeHostEngine()
