"""Job identity from the GPU processes' /proc entries: Slurm, MPI, torchrun, else the
process session.

Every ``jobs.interval`` it takes the compute processes NVML last listed and, for each
process not seen before, reads a few small files under ``proc_root``:

- ``<pid>/stat``: the session, the parent and the start time (the cache key, with the pid,
  so a reused pid is a new process);
- ``<pid>/cgroup``: a Slurm job's ``job_<id>`` directory (readable by anyone; only root
  can move a process into or out of it, so it is the scheduler's word);
- ``<pid>/environ`` (``jobs.environ``): at most :data:`MAX_ENVIRON` bytes, of which only
  the variables in :data:`identity.VARIABLES` are looked at. Reading it needs the process's
  uid or CAP_SYS_PTRACE; other values never leave this module. A Slurm job named there is
  believed only with evidence (:func:`identity.from_process`); the parents' ``stat`` and
  ``status`` are read to find a slurmstepd when the cgroup does not say.

The identity is cached per (pid, start time): a listed pid's ``stat`` is read again every
poll, and a new start time is a new process. Every read is bounded
(:mod:`exporter.sources.jobs.reader`): a process whose read does not return in time is
counted (``read_timeout``) and skipped until its pid leaves NVML's list or its start time
changes; any other ``OSError`` skips that process alone, counted by errno. A GPU's job is
the strongest of its processes' identities; several different jobs on one GPU are counted
once per change.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from exporter.readings import JobAssignments, JobIdentity, ProcessInfo, strongest
from exporter.snapshot import SourceResult
from exporter.sources.base import BlockingSource
from exporter.sources.jobs import identity as ident
from exporter.sources.jobs.config import JobsConfig
from exporter.sources.jobs.reader import (
    Reader,
    ReadTimeout,
    Unavailable,
    errno_reason,
    read_file,
    read_small,
)
from exporter.util import OnChange

log = structlog.get_logger("jobs")

SOURCE = "jobs_proc"
MAX_ENVIRON = 128 * 1024
"""Bytes of ``environ`` read at most; a larger environment is cut (counted, the cut entry
ignored). Slurm, PMIx and torchrun put their variables among the first few KiB."""
MAX_SMALL = 16 * 1024
"""Bytes of ``stat``, ``status`` or ``cgroup`` read at most."""
MAX_ANCESTORS = 32
"""Parents looked at for a slurmstepd (a task is its child or grandchild)."""
MAX_LOGGED_JOBS = 8
"""Job ids named in one ``gpu_shared_by_jobs`` line; the rest are a count."""

Processes = Callable[[], tuple[ProcessInfo, ...]]
"""The compute processes of the last GPU poll (a view of the snapshot)."""


class Gone(Exception):
    """The process ended between NVML's list and the read."""


def read_capped(path: str, cap: int) -> tuple[bytes, bool]:
    """At most ``cap`` bytes of ``path`` and whether there was more, read without blocking
    on a FIFO or following a symlink; :class:`Gone` when the process has ended, every other
    ``OSError`` (``PermissionError`` included) passes through."""
    try:
        return read_file(path, cap)
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise Gone(path) from exc
    except OSError as exc:
        if exc.errno == errno.ESRCH:  # the task exited while we read
            raise Gone(path) from exc
        raise


@dataclass
class Read:
    """What one process's files said: built on the reader's thread, judged on the poll's."""

    stat: ident.Stat | None = None
    cgroup: ident.Cgroup | None = None
    variables: Mapping[str, bytes] = field(default_factory=dict)
    session: tuple[int, int | None] | None = None
    stepd: bool = False
    reasons: list[str] = field(default_factory=list)
    """Counted as they are: permission_denied, environ_denied, environ_too_long, ..."""


@dataclass(frozen=True, slots=True)
class Known:
    """A process read once: its start time (None when unknown) and its identity."""

    start: int | None
    identity: JobIdentity | None


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
        self._cache: dict[int, Known] = {}
        """pid -> what it was read as, while NVML lists it and its start time holds."""
        self._starts: dict[int, int] = {}
        """Start times read by a process read still running (kept when it times out)."""
        self._reader = Reader(f"source-{SOURCE}-read")
        self._log = OnChange(log)
        self._conflicts: frozenset[tuple[str, tuple[JobIdentity, ...]]] = frozenset()

    async def close(self) -> None:
        self._reader.stop()  # a poll waiting on a stuck read returns now
        await super().close()

    def poll_blocking(self) -> SourceResult:
        processes = self._processes()
        errors: dict[str, int] = {}
        live: dict[int, list[str]] = {}
        for p in processes:
            live.setdefault(p.pid, []).append(p.gpu)
        for pid in [pid for pid in self._cache if pid not in live]:
            del self._cache[pid]  # a pid NVML stopped listing: its process may be gone
        gone = self._recheck(errors)
        gone |= self._read_new(sorted(pid for pid in live if pid not in self._cache), errors)
        if len(gone) == len(live) and self._reader.map(os.path.isdir, [self._root])[0] is not True:
            return self._failed("proc_missing", f"proc root {self._root} is not a directory")
        if processes and len(gone) == len(live):
            return self._failed(
                "no_host_pid",
                f"none of the {len(gone)} GPU process ids exist under {self._root}: "
                "run with hostPID",
            )
        if self._reader.stuck() >= self._reader.max_stuck:
            return self._failed("read_timeout", f"{self._reader.stuck()} reads under "
                                f"{self._root} have not returned: job identity paused")
        if gone:
            errors["pid_gone"] = len(gone)
        per_gpu: dict[str, set[JobIdentity]] = {}
        for pid, on in live.items():
            known = self._cache.get(pid)
            if known is not None and known.identity is not None:
                for gpu in on:
                    per_gpu.setdefault(gpu, set()).add(known.identity)
        gpus = self._assign(per_gpu, errors)
        self._log("state", "ok", "ok", event="job_identity", processes=len(live), jobs=len(
            set(gpus.values())))
        return SourceResult(source=SOURCE, errors=errors, reading=JobAssignments(SOURCE, gpus))

    def _recheck(self, errors: dict[str, int]) -> set[int]:
        """Read each known process's start time again: a new one is a new process (its pid
        reused), dropped here to be read anew. Returns the pids that are gone."""
        pids = sorted(pid for pid, known in self._cache.items() if known.start is not None)
        gone: set[int] = set()
        for pid, outcome in zip(pids, self._reader.map(self._start_of, pids), strict=True):
            if isinstance(outcome, Gone):
                gone.add(pid)
                del self._cache[pid]
            elif isinstance(outcome, ReadTimeout):
                self._timed_out(pid, None, errors)
            elif isinstance(outcome, int) and outcome != self._cache[pid].start:
                del self._cache[pid]
        return gone

    def _start_of(self, pid: int) -> int | None:
        """The start time in ``<pid>/stat`` (on the reader's thread); None when unreadable."""
        try:
            raw = read_small(f"{self._root}/{pid}/stat", MAX_SMALL)
        except (FileNotFoundError, ProcessLookupError) as exc:
            raise Gone(pid) from exc
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                raise Gone(pid) from exc
            return None
        stat = ident.parse_stat(raw.decode("ascii", "replace"))
        return stat.start_ticks if stat is not None else None

    def _read_new(self, pids: list[int], errors: dict[str, int]) -> set[int]:
        """Read and judge processes not known yet. Returns the pids that are gone."""
        gone: set[int] = set()
        for pid, outcome in zip(pids, self._reader.map(self._read_process, pids), strict=True):
            start = self._starts.pop(pid, None)
            if isinstance(outcome, Gone):
                gone.add(pid)
            elif isinstance(outcome, ReadTimeout):
                self._timed_out(pid, start, errors)
            elif isinstance(outcome, Unavailable):
                continue  # not read: the reader is stopping or too many reads are stuck
            elif isinstance(outcome, OSError):
                reason = errno_reason(outcome)
                _count(errors, reason)
                self._cache[pid] = Known(start, None)
                # once per process: it is read once while its pid and start time hold
                log.warning("job_process_skipped", pid=pid, reason=reason,
                            error=outcome.strerror)
            elif isinstance(outcome, Read):
                self._cache[pid] = Known(
                    outcome.stat.start_ticks if outcome.stat else None,
                    self._judge(pid, outcome, errors),
                )
            elif isinstance(outcome, BaseException):
                raise outcome  # a bug: the scheduler turns it into a failed poll
        return gone

    def _timed_out(self, pid: int, start: int | None, errors: dict[str, int]) -> None:
        _count(errors, "read_timeout")
        self._cache[pid] = Known(start, None)
        log.warning("job_read_timeout", pid=pid, root=self._root,
                    seconds=self._reader.timeout,
                    hint="skipped until it changes (a process stuck in the kernel)")

    def _read_process(self, pid: int) -> Read:
        """Every file of one process (on the reader's thread): :class:`Gone`, or an
        ``OSError`` that skips the process, or what the files said."""
        base = os.path.join(self._root, str(pid))
        read = Read()
        try:
            raw, _ = read_capped(os.path.join(base, "stat"), MAX_SMALL)
            read.stat = ident.parse_stat(raw.decode("ascii", "replace"))
            if read.stat is None:
                read.reasons.append("stat_invalid")
            else:
                self._starts[pid] = read.stat.start_ticks
        except PermissionError:
            read.reasons.append("permission_denied")
        try:
            raw, _ = read_capped(os.path.join(base, "cgroup"), MAX_SMALL)
            read.cgroup = ident.parse_cgroup(raw.decode("utf-8", "replace"))
        except PermissionError:
            read.reasons.append("permission_denied")
        read.variables = self._variables(base, read.reasons)
        if read.stat is not None:
            read.session = self._session(pid, read.stat)
            cgroup = read.cgroup
            if cgroup is not None and not cgroup.slurm and any(
                ident.slurm_claim(k, v.decode("ascii", "replace"))
                for k, v in read.variables.items()
            ):
                read.stepd = self._below_slurmstepd(read.stat)
        return read

    def _variables(self, base: str, reasons: list[str]) -> Mapping[str, bytes]:
        if not self._environ:
            return {}
        try:
            raw, truncated = read_capped(os.path.join(base, "environ"), MAX_ENVIRON)
        except PermissionError:
            reasons.append("environ_denied")
            return {}
        if truncated:
            reasons.append("environ_too_long")
        return ident.environ_variables(raw, truncated)

    def _session(self, pid: int, stat: ident.Stat, depth: int = 0) -> tuple[int, int | None]:
        """(session id, its leader's start ticks or None when the leader is gone). A
        process that leads a session of its own belongs to its parent's job unless that
        parent is a daemon (a child of init: tmux, screen, sshd's listener): torchrun's
        agent starts every worker in a new session, and the ranks of one launch are one
        job, as they are when spawned without sessions of their own."""
        if stat.session <= 0:  # no session visible from here: the process is its own job
            return pid, stat.start_ticks
        if stat.session == pid and stat.ppid > 1 and depth < 8:
            parent = self._stat_of(stat.ppid)
            if parent is not None and parent.ppid > 1:
                return self._session(stat.ppid, parent, depth + 1)
        leader = self._stat_of(stat.session)
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

    def _below_slurmstepd(self, stat: ident.Stat) -> bool:
        """Whether a parent within :data:`MAX_ANCESTORS` is slurmstepd running as root (any
        process may call itself slurmstepd; only root's is Slurm's)."""
        ppid = stat.ppid
        for _ in range(MAX_ANCESTORS):
            if ppid <= 1:
                return False
            parent = self._stat_of(ppid)
            if parent is None:
                return False
            if parent.comm == "slurmstepd":
                return self._runs_as_root(ppid)
            ppid = parent.ppid
        return False

    def _runs_as_root(self, pid: int) -> bool:
        try:
            raw, _ = read_capped(os.path.join(self._root, str(pid), "status"), MAX_SMALL)
        except (Gone, PermissionError):
            return False
        for line in raw.decode("ascii", "replace").splitlines():
            if line.startswith("Uid:"):
                return line.split()[1:2] == ["0"]
        return False

    def _judge(self, pid: int, read: Read, errors: dict[str, int]) -> JobIdentity | None:
        """The identity of one process read, its problems counted and logged once."""
        base = os.path.join(self._root, str(pid))
        for reason in read.reasons:
            _count(errors, reason)
        if "environ_denied" in read.reasons:
            self._log("environ", "denied", "ok", event="job_environ", level="warning",
                      path=base,
                      hint="grant CAP_SYS_PTRACE or set jobs.environ false (docs/jobs.md)")
        elif self._environ and read.stat is not None:
            self._log("environ", "ok", "ok", event="job_environ")
        found, bad, claims = ident.from_process(read.variables, read.cgroup, read.stepd)
        for dropped in bad:
            _count(errors, dropped.reason)
            self._log(("bad", dropped.name), dropped.reason, "", event="job_variable_dropped",
                      level="warning", variable=dropped.name, path=base)
        for claim in claims:  # once per process, which is judged once (the damper bounds more)
            _count(errors, claim.reason)
            log.warning(claim.reason, variable=claim.variable, pid=pid, why=claim.why)
        if found is None and read.session is not None:
            found = ident.session_identity(self._node, *read.session)
        return found

    def _assign(
        self, per_gpu: Mapping[str, set[JobIdentity]], errors: dict[str, int]
    ) -> dict[str, JobIdentity]:
        """Each GPU's strongest identity; several jobs on one GPU counted once per change."""
        gpus: dict[str, JobIdentity] = {}
        conflicts = set()
        for gpu, found in per_gpu.items():
            best = strongest(found)
            if best is not None:
                gpus[gpu] = best
            if len(found) > 1:
                conflicts.add((gpu, tuple(sorted(found, key=lambda j: j.key))))
        new = conflicts - self._conflicts
        if new:
            errors["several_jobs"] = len(new)
        for gpu, jobs in sorted(new):
            log.warning("gpu_shared_by_jobs", gpu=gpu, chosen=gpus[gpu].job_id,
                        jobs=[j.job_id for j in jobs[:MAX_LOGGED_JOBS]],
                        jobs_total=len(jobs))
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
