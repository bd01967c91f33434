"""Job identity from the GPU processes' /proc entries: Slurm, MPI, torchrun, else the
process session.

Every ``jobs.interval`` it takes the compute processes NVML last listed and, for each
process not seen before, reads a few small files under ``proc_root``:

- ``<pid>/stat``: the session, the parent and the start time;
- ``<pid>/cgroup``: a Slurm job's ``job_<id>`` directory, believed only at the paths
  slurmd's own cgroup plugins create (:func:`identity.parse_cgroup`; only root can make
  them or move a process there, so they are the scheduler's word), checked against the
  process's uid (v1, ``<pid>/status``) and the directory's owner where the cgroup file
  system is mounted here;
- ``<pid>/environ`` (``jobs.environ``): at most :data:`MAX_ENVIRON` bytes, of which only
  the variables :func:`identity.environment` names are looked at. Reading it needs the process's
  uid or CAP_SYS_PTRACE; other values never leave this module. A Slurm job named there is
  believed only where Slurm vouches for it (:func:`identity.from_process`); the parents'
  ``stat`` and ``status`` and a slurmstepd's ``cmdline`` (its title names its job) are
  read when the cgroup does not say.

The identity is cached per process: NVML's pids are looked up in one listing of
``proc_root`` per poll (or a ``stat`` each, when they are few among many), which gives the
inode of each ``/proc/<pid>`` (the kernel makes a new one for every process), so a pid gone
is forgotten and a reused pid is read anew without a read per known process. Every read is bounded
(:mod:`exporter.sources.jobs.reader`): a process whose read does not return in time is
counted (``read_timeout``) and not read again before that read ends; while it is stuck, no
other new process of its GPUs is read (one hung job costs one thread), and every identity
already known goes on being published. Any other ``OSError`` skips that process alone,
counted by errno. A GPU's job is the strongest of its processes' identities; several
different jobs on one GPU are counted once per change.
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
LIST_TIMEOUT = 10.0
"""Seconds the listing of ``proc_root`` may take: 100,000 entries list in about 0.1 s on an
idle node; a loaded one may be many times slower, and a listing that is given up costs the
poll its new processes (known ones are still published)."""
STAT_COST = 3
"""A ``stat`` of one ``/proc/<pid>`` costs about what listing three entries does."""
RELIST_POLLS = 60
"""Polls between listings while ``stat`` is the cheaper way (to learn the node's count)."""
MAX_CMDLINE = 256
"""Bytes of a slurmstepd's ``cmdline`` read: its title, ``slurmstepd: [<job>.<step>]``."""
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
    stepd: str | None = None
    """The job id of the root slurmstepd above the process (None: none found)."""
    reasons: list[str] = field(default_factory=list)
    """Counted as they are: permission_denied, environ_denied, environ_too_long, ..."""


@dataclass(frozen=True, slots=True)
class Known:
    """A process read once: the inode of its ``/proc/<pid>`` and its identity."""

    inode: int
    identity: JobIdentity | None
    stuck: bool = False
    """Its read was given up: read again once that read has returned."""


def climb_to_root(proc_root: str) -> str:
    """The ``/..`` run that leads from this process's cgroup namespace to the host's root,
    read from PID 1's cgroup v2 path (``/../../init.scope`` seen from a pod's namespace):
    "" where the namespace is the host's, or PID 1 is not the host's init."""
    try:
        raw, _ = read_file(os.path.join(proc_root, "1", "cgroup"), MAX_SMALL)
    except OSError:
        return ""
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith("0::/"):
            parts = line[3:].split("/")[1:]
            run = 0
            while run < len(parts) and parts[run] == "..":
                run += 1
            return "/.." * run
    return ""


def cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> dict[str, str]:
    """Where this process sees each cgroup hierarchy: "" for v2, a v1 controller (or
    ``name=systemd``) for v1 -> its mount point; only mounts of the hierarchy's root, so
    a ``/proc/<pid>/cgroup`` path appended to it is that cgroup's directory."""
    mounts: dict[str, str] = {}
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return mounts
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if len(fields) < 5 or len(after) < 3 or fields[3] != "/":
            continue
        if after[0] == "cgroup2":
            mounts.setdefault("", fields[4])
        elif after[0] == "cgroup":
            for option in after[2].split(","):
                if option not in ("rw", "ro") and not option.startswith("release_agent"):
                    mounts.setdefault(option, fields[4])
    return mounts


class ProcJobSource(BlockingSource):
    """Publishes :class:`JobAssignments` with each GPU's strongest process identity."""

    name = SOURCE

    def __init__(
        self, config: JobsConfig, proc_root: str, node: str, processes: Processes,
        keep: Any = None, mounts: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.interval = config.interval
        self._environ = config.environ
        self._prefix = config.slurm_cgroup_prefix or climb_to_root(proc_root)
        self._mounts = cgroup_mounts() if mounts is None else dict(mounts)
        """cgroup hierarchies as mounted here, for the owner of a Slurm job's directory."""
        self._root = proc_root
        self._node = node
        self._processes = processes
        self._keep = keep  # e.g. the simulated node's temporary proc tree, freed with us
        self._cache: dict[int, Known] = {}
        """pid -> what it was read as, while NVML lists it and its /proc inode holds."""
        self._reader = Reader(f"source-{SOURCE}-read")
        self._entries = 0
        """Entries in ``proc_root`` at its last listing: the node's processes."""
        self._interned: dict[JobIdentity, JobIdentity] = {}
        self._since_listing = 0
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
        listing = self._reader.map(self._list, [frozenset(live)], keys=lambda _: ("listing",),
                                   timeout=LIST_TIMEOUT)[0]
        if isinstance(listing, (FileNotFoundError, NotADirectoryError)):
            return self._failed("proc_missing", f"proc root {self._root} is not a directory")
        gone: set[int] = set()
        if isinstance(listing, dict):
            gone = self._compare(live, listing)
            self._read_new(live, listing, errors)
        elif isinstance(listing, ReadTimeout):  # later polls: Busy until it returns
            _count(errors, "read_timeout")
            log.warning("job_listing_timeout", root=self._root, seconds=LIST_TIMEOUT,
                        hint="known processes keep their jobs; new ones wait")
        elif isinstance(listing, OSError) and not isinstance(listing, Unavailable):
            return self._failed(errno_reason(listing), f"cannot list {self._root}: "
                                f"{listing.strerror or listing}")
        if processes and len(gone) == len(live):
            return self._failed(
                "no_host_pid",
                f"none of the {len(gone)} GPU process ids exist under {self._root}: "
                "run with hostPID",
            )
        if gone:
            errors["pid_gone"] = len(gone)
        by_object: dict[str, dict[int, JobIdentity]] = {}
        cache = self._cache
        for pid, on in live.items():
            known = cache.get(pid)
            if known is not None and known.identity is not None:
                identity = known.identity  # interned: equal identities are one object
                for gpu in on:
                    by_object.setdefault(gpu, {})[id(identity)] = identity
        per_gpu = {gpu: set(found.values()) for gpu, found in by_object.items()}
        gpus = self._assign(per_gpu, errors)
        self._log("state", "ok", "ok", event="job_identity", processes=len(live), jobs=len(
            set(gpus.values())))
        return SourceResult(source=SOURCE, errors=errors, reading=JobAssignments(SOURCE, gpus),
                            stuck_reads=self._reader.stuck())

    def _list(self, wanted: frozenset[int]) -> dict[int, int]:
        """pid -> inode of ``<root>/<pid>`` for the wanted pids present (on the reader's
        thread). The kernel gives every process a ``/proc/<pid>`` inode of its own, so a
        reused pid shows a new inode, and nothing is read. Whichever is cheaper: one
        listing (``getdents``, about 1 µs per process on the node) or a ``stat`` per
        wanted pid (about 2.5 µs each) when they are few among many; the node's count is
        learnt from a listing, taken again every :data:`RELIST_POLLS` polls."""
        if not wanted:
            if not os.path.isdir(self._root):
                raise FileNotFoundError(errno.ENOENT, "not a directory", self._root)
            return {}
        found: dict[int, int] = {}
        if len(wanted) * STAT_COST < self._entries and self._since_listing < RELIST_POLLS:
            self._since_listing += 1
            for pid in wanted:
                try:
                    found[pid] = os.stat(f"{self._root}/{pid}", follow_symlinks=False).st_ino
                except (FileNotFoundError, ProcessLookupError):
                    continue
            if not found and not os.path.isdir(self._root):
                raise FileNotFoundError(errno.ENOENT, "not a directory", self._root)
            return found
        names = {str(pid) for pid in wanted}
        entries = 0
        with os.scandir(self._root) as listing:
            for entry in listing:
                entries += 1
                if entry.name in names:
                    found[int(entry.name)] = entry.inode()
        self._entries, self._since_listing = entries, 0
        return found

    def _compare(self, live: Mapping[int, list[str]], inodes: Mapping[int, int]) -> set[int]:
        """Forget the processes that ended or whose pid was reused (a new inode), and those
        whose stuck read has since returned (to be read again). Returns the pids gone."""
        gone = {pid for pid in live if pid not in inodes}
        for pid, known in list(self._cache.items()):
            if pid in gone or known.inode != inodes.get(pid) or (
                known.stuck and not self._reader.held(pid)
            ):
                del self._cache[pid]
        return gone

    def _read_new(
        self, live: Mapping[int, list[str]], inodes: Mapping[int, int], errors: dict[str, int]
    ) -> None:
        """Read and judge the processes not known yet; a process whose GPU waits on a stuck
        read of another is left for a later poll."""
        pids = sorted(pid for pid in inodes if pid not in self._cache)

        def keys(pid: int) -> tuple[object, ...]:
            return (pid, *(("gpu", gpu) for gpu in live[pid]))

        outcomes = self._reader.map(self._read_process, pids, keys=keys)
        for pid, outcome in zip(pids, outcomes, strict=True):
            inode = inodes[pid]
            if isinstance(outcome, Gone):
                continue  # ended after the listing: the next listing says so
            if isinstance(outcome, ReadTimeout):
                self._timed_out(pid, inode, errors)
            elif isinstance(outcome, Unavailable):
                continue  # not read: its GPU waits on a stuck read, or the reader is full
            elif isinstance(outcome, OSError):
                reason = errno_reason(outcome)
                _count(errors, reason)
                self._cache[pid] = Known(inode, None)
                # once per process: it is read once while its pid and inode hold
                log.warning("job_process_skipped", pid=pid, reason=reason,
                            error=outcome.strerror)
            elif isinstance(outcome, Read):
                self._cache[pid] = Known(inode, self._intern(self._judge(pid, outcome, errors)))
            elif isinstance(outcome, BaseException):
                raise outcome  # a bug: the scheduler turns it into a failed poll

    def _intern(self, identity: JobIdentity | None) -> JobIdentity | None:
        """One object per distinct identity, so a poll groups 10,000 processes by object
        (``id``) instead of hashing each identity's fields; forgotten identities are
        dropped once the table is twice the processes known."""
        if identity is None:
            return None
        if len(self._interned) > 2 * len(self._cache) + 64:
            self._interned = {k.identity: k.identity for k in self._cache.values()
                              if k.identity is not None}
        return self._interned.setdefault(identity, identity)

    def _timed_out(self, pid: int, inode: int, errors: dict[str, int]) -> None:
        _count(errors, "read_timeout")
        self._cache[pid] = Known(inode, None, stuck=True)
        log.warning("job_read_timeout", pid=pid, root=self._root,
                    seconds=self._reader.timeout,
                    hint="not read again until that read returns (a process stuck in the "
                    "kernel); its GPUs' other new processes wait")

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
        except PermissionError:
            read.reasons.append("permission_denied")
        try:
            raw, _ = read_capped(os.path.join(base, "cgroup"), MAX_SMALL)
            read.cgroup = self._checked(
                base, ident.parse_cgroup(raw.decode("utf-8", "replace"), self._prefix))
        except PermissionError:
            read.reasons.append("permission_denied")
        read.variables = self._variables(base, read.reasons)
        if read.stat is not None:
            read.session = self._session(pid, read.stat)
            cgroup = read.cgroup
            if cgroup is not None and cgroup.job is None and any(
                ident.slurm_claim(k, v.decode("ascii", "replace"))
                for k, v in read.variables.items()
            ):
                read.stepd = self._slurmstepd_job(read.stat)
        return read

    def _checked(self, base: str, cgroup: ident.Cgroup) -> ident.Cgroup:
        """A Slurm job cgroup checked where more can tell: on v1 its ``uid_<uid>`` against
        the process's uid, and the job directory's owner (root's, as slurmd makes it;
        a user's in a subtree systemd delegated to them) where the cgroup file system is
        mounted here."""
        if cgroup.job is None:
            return cgroup
        if cgroup.uid is not None:
            uid = self._uid_of(base)
            if uid is not None and uid != cgroup.uid:
                return cgroup.refuse(f"its cgroup's uid_{cgroup.uid} is not its uid {uid}")
        for controllers, path in cgroup.dirs:
            mount = next((self._mounts[c] for c in controllers.split(",")
                          if c in self._mounts), None)
            if mount is None or ".." in path.split("/"):
                continue  # not mounted here, or outside this namespace's view: cannot tell
            try:
                owner = os.stat(mount + path, follow_symlinks=False).st_uid
            except OSError:
                continue  # not visible from here (another cgroup namespace): cannot tell
            if owner != 0:
                return cgroup.refuse(f"its job directory is owned by uid {owner}, not root")
        return cgroup

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

    def _slurmstepd_job(self, stat: ident.Stat) -> str | None:
        """The job of the nearest parent within :data:`MAX_ANCESTORS` that is slurmstepd
        running as root (any process may call itself slurmstepd; only root's is Slurm's),
        from its title: a stepd vouches for its own job only. None when there is none;
        ``unknown`` when its title names no job."""
        ppid = stat.ppid
        for _ in range(MAX_ANCESTORS):
            if ppid <= 1:
                return None
            parent = self._stat_of(ppid)
            if parent is None:
                return None
            if parent.comm == "slurmstepd":
                if self._uid_of(os.path.join(self._root, str(ppid))) != 0:
                    return None
                try:
                    raw, _ = read_capped(os.path.join(self._root, str(ppid), "cmdline"),
                                         MAX_CMDLINE)
                except (Gone, PermissionError):
                    return None
                return ident.stepd_job(raw) or "unknown"
            ppid = parent.ppid
        return None

    def _uid_of(self, base: str) -> int | None:
        """The real uid in ``<base>/status``; None when unreadable."""
        try:
            raw, _ = read_capped(os.path.join(base, "status"), MAX_SMALL)
        except (Gone, PermissionError):
            return None
        for line in raw.decode("ascii", "replace").splitlines():
            if line.startswith("Uid:"):
                fields = line.split()
                return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
        return None

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
        if read.cgroup is not None and read.cgroup.refused is not None:
            _count(errors, "slurm_cgroup_refused")  # once per process, judged once
            log.warning("slurm_cgroup_refused", pid=pid, why=read.cgroup.refused)
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
            reading=JobAssignments(SOURCE), stuck_reads=self._reader.stuck(),
        )


def _count(errors: dict[str, int], reason: str) -> None:
    errors[reason] = errors.get(reason, 0) + 1
