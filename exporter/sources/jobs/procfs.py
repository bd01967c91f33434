"""Job identity from the GPU processes' /proc entries: Slurm, MPI, torchrun, else the
process session.

Every ``jobs.interval`` it takes the compute processes NVML last listed and, for each
process not seen before, reads three small files under ``proc_root``:

- ``<pid>/stat``: the session and the start time (the cache key, with the pid, so a reused
  pid is a new process);
- ``<pid>/cgroup``: a Slurm job's ``job_<id>`` directory (readable by anyone);
- ``<pid>/environ`` (``jobs.environ``): at most :data:`MAX_ENVIRON` bytes, of which only
  the variables in :data:`identity.VARIABLES` are looked at. Reading it needs the process's
  uid or CAP_SYS_PTRACE; other values never leave this module.

The identity is cached per (pid, start time) and dropped when NVML no longer lists the
pid. A pid listed at the previous poll too is the same process (a pid is not reused while
its process lives, and reusing it within one interval would take the kernel's whole pid
range), so a steady node reads nothing but the NVML list. A GPU's job is the strongest of its
processes' identities; several different jobs on one GPU are counted once per change.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from exporter.collectors.jobs import JobsConfig
from exporter.readings import JobAssignments, JobIdentity, ProcessInfo
from exporter.snapshot import SourceResult
from exporter.sources.base import BlockingSource
from exporter.sources.jobs import identity as ident
from exporter.util import OnChange

log = structlog.get_logger("jobs")

SOURCE = "jobs_proc"
MAX_ENVIRON = 128 * 1024
"""Bytes of ``environ`` read at most; a larger environment is cut (counted, the cut entry
ignored). Slurm, PMIx and torchrun put their variables among the first few KiB."""
MAX_SMALL = 16 * 1024
"""Bytes of ``stat`` or ``cgroup`` read at most."""

Processes = Callable[[], tuple[ProcessInfo, ...]]
"""The compute processes of the last GPU poll (a view of the snapshot)."""


class Gone(Exception):
    """The process ended between NVML's list and the read."""


def read_capped(path: str, cap: int) -> tuple[bytes, bool]:
    """At most ``cap`` bytes of ``path`` and whether there was more; :class:`Gone` when the
    process has ended, ``PermissionError`` passes through."""
    try:
        with open(path, "rb", buffering=0) as f:
            data = f.read(cap + 1)
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise Gone(path) from exc
    except OSError as exc:
        if exc.errno == errno.ESRCH:  # the task exited while we read
            raise Gone(path) from exc
        raise
    return data[:cap], len(data) > cap


class ProcJobSource(BlockingSource):
    """Publishes :class:`JobAssignments` with each GPU's strongest process identity."""

    name = SOURCE

    def __init__(
        self, config: JobsConfig, proc_root: str, node: str, processes: Processes,
        keep: Any = None,
    ) -> None:
        super().__init__()
        self.interval = config.interval
        self._environ = config.environ
        self._root = proc_root
        self._node = node
        self._processes = processes
        self._keep = keep  # e.g. the simulated node's temporary proc tree, freed with us
        # pid -> its identity, None when it has none (read once, while NVML lists it)
        self._cache: dict[int, JobIdentity | None] = {}
        self._log = OnChange(log)
        self._conflicts: frozenset[tuple[str, tuple[JobIdentity, ...]]] = frozenset()

    def poll_blocking(self) -> SourceResult:
        if not os.path.isdir(self._root):
            return self._failed("proc_missing", f"proc root {self._root} is not a directory")
        processes = self._processes()
        errors: dict[str, int] = {}
        live: dict[int, list[str]] = {}
        for p in processes:
            live.setdefault(p.pid, []).append(p.gpu)
        for pid in [pid for pid in self._cache if pid not in live]:
            del self._cache[pid]  # a pid NVML stopped listing: its process may be gone
        gone = 0
        per_gpu: dict[str, set[JobIdentity]] = {}
        for pid, on in sorted(live.items()):
            try:
                found = self._identify(pid, errors)
            except Gone:
                gone += 1
                continue
            if found is not None:
                for gpu in on:
                    per_gpu.setdefault(gpu, set()).add(found)
        if processes and gone == len(live):
            return self._failed(
                "no_host_pid",
                f"none of the {gone} GPU process ids exist under {self._root}: run with hostPID",
            )
        if gone:
            errors["pid_gone"] = gone
        gpus = self._assign(per_gpu, errors)
        self._log("state", "ok", "ok", event="job_identity", processes=len(live), jobs=len(
            set(gpus.values())))
        return SourceResult(source=SOURCE, errors=errors, reading=JobAssignments(SOURCE, gpus))

    def _identify(self, pid: int, errors: dict[str, int]) -> JobIdentity | None:
        """The cached identity of ``pid``, read when NVML lists it anew."""
        if pid in self._cache:  # listed without a break since it was read
            return self._cache[pid]
        base = os.path.join(self._root, str(pid))
        stat = self._stat(base, errors)
        found = self._cache[pid] = self._read(pid, base, stat, errors)
        return found

    def _stat(self, base: str, errors: dict[str, int]) -> ident.Stat | None:
        try:
            raw, _ = read_capped(os.path.join(base, "stat"), MAX_SMALL)
        except PermissionError:
            _count(errors, "permission_denied")
            return None
        stat = ident.parse_stat(raw.decode("ascii", "replace"))
        if stat is None:
            _count(errors, "stat_invalid")
        return stat

    def _read(
        self, pid: int, base: str, stat: ident.Stat | None, errors: dict[str, int]
    ) -> JobIdentity | None:
        cgroup_job = None
        try:
            raw, _ = read_capped(os.path.join(base, "cgroup"), MAX_SMALL)
            cgroup_job = ident.slurm_job_of_cgroup(raw.decode("utf-8", "replace"))
        except PermissionError:
            _count(errors, "permission_denied")
        variables = self._variables(base, errors)
        found, bad = ident.from_process(variables, cgroup_job)
        for dropped in bad:
            _count(errors, dropped.reason)
            self._log(("bad", dropped.name), dropped.reason, "", event="job_variable_dropped",
                      level="warning", variable=dropped.name, path=base)
        if found is None and stat is not None:
            found = ident.session_identity(self._node, *self._session(pid, stat))
        return found

    def _variables(self, base: str, errors: dict[str, int]) -> Mapping[str, bytes]:
        if not self._environ:
            return {}
        try:
            raw, truncated = read_capped(os.path.join(base, "environ"), MAX_ENVIRON)
        except PermissionError:
            _count(errors, "environ_denied")
            self._log("environ", "denied", "ok", event="job_environ", level="warning",
                      path=base,
                      hint="grant CAP_SYS_PTRACE or set jobs.environ false (docs/jobs.md)")
            return {}
        self._log("environ", "ok", "ok", event="job_environ")
        if truncated:
            _count(errors, "environ_too_long")
        return ident.environ_variables(raw, truncated)

    def _session(self, pid: int, stat: ident.Stat, depth: int = 0) -> tuple[int, int | None]:
        """(session id, its leader's start ticks or None when the leader is gone). A
        process that leads a session of its own belongs to its parent's job unless that
        parent is a daemon (a child of init: tmux, screen, sshd's listener): torchrun's
        agent starts every worker in a new session, and the ranks of one launch are one
        job, as they are when spawned without sessions of their own."""
        if stat.session <= 0:  # no session visible from here: the process is its own job
            return pid, stat.start_ticks
        if stat.session == pid and stat.parent > 1 and depth < 8:
            parent = self._stat_of(stat.parent)
            if parent is not None and parent.parent > 1:
                return self._session(stat.parent, parent, depth + 1)
        try:
            raw, _ = read_capped(os.path.join(self._root, str(stat.session), "stat"), MAX_SMALL)
        except (Gone, PermissionError):
            return stat.session, None
        leader = ident.parse_stat(raw.decode("ascii", "replace"))
        if leader is None or leader.session != stat.session:
            return stat.session, None
        return stat.session, leader.start_ticks

    def _stat_of(self, pid: int) -> ident.Stat | None:
        """Another process's stat (a parent's), None when gone, hidden or unreadable."""
        try:
            raw, _ = read_capped(os.path.join(self._root, str(pid), "stat"), MAX_SMALL)
        except (Gone, PermissionError):
            return None
        return ident.parse_stat(raw.decode("ascii", "replace"))

    def _assign(
        self, per_gpu: Mapping[str, set[JobIdentity]], errors: dict[str, int]
    ) -> dict[str, JobIdentity]:
        """Each GPU's strongest identity; several jobs on one GPU counted once per change."""
        gpus: dict[str, JobIdentity] = {}
        conflicts = set()
        for gpu, found in per_gpu.items():
            best = ident.strongest(found)
            if best is not None:
                gpus[gpu] = best
            if len(found) > 1:
                conflicts.add((gpu, tuple(sorted(found, key=lambda j: j.key))))
        new = conflicts - self._conflicts
        if new:
            errors["several_jobs"] = len(new)
        for gpu, jobs in sorted(new):
            log.warning("gpu_shared_by_jobs", gpu=gpu, jobs=[j.job_id for j in jobs],
                        chosen=gpus[gpu].job_id)
        self._conflicts = frozenset(conflicts)
        return gpus

    def _failed(self, reason: str, error: str) -> SourceResult:
        self._log("state", reason, None, event="job_identity", level="warning", error=error)
        return SourceResult(
            source=SOURCE, ok=False, reason=reason, error=error,
            reading=JobAssignments(SOURCE),
        )


def _count(errors: dict[str, int], reason: str) -> None:
    errors[reason] = errors.get(reason, 0) + 1
