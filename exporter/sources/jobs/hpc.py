"""Job identity from dcgm-exporter's HPC job-mapping directory (``--hpc-job-mapping-dir``).

Sites that already run dcgm-exporter with HPC job mapping have a scheduler prolog write, into
one directory, a file per GPU named by its index (``0``, ``1``, ...) holding the ids of the
jobs on that GPU, one per line; the epilog removes or empties it. dcgm-exporter skips
directories and names that are not integers, and so does this source. A GPU index also
covers its MIG instances (``<index>-<gpu instance>``), as dcgm-exporter labels them.

Bounded: at most :data:`MAX_FILES` files (the lowest GPU indices, in numeric order),
:data:`MAX_FILE` bytes and :data:`MAX_JOBS` lines of each; each job id passes the same check
as the process source's values. A symlink is never followed, a FIFO never opened for
reading in blocking mode, and every listing and read runs on an abandonable thread bounded
in time (:mod:`exporter.sources.jobs.reader`): a file (or listing) whose read is stuck is
not read again until that read returns, and meanwhile its GPU keeps the job last read from
it, the others theirs. Problems (an unreadable file, a bad id, a GPU listing several jobs)
are counted once each time they appear, not on every poll.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import structlog

from exporter.readings import Device, JobAssignments, JobIdentity, JobSource
from exporter.snapshot import SourceResult
from exporter.sources.base import BlockingSource
from exporter.sources.jobs import identity as ident
from exporter.sources.jobs.reader import (
    Reader,
    ReadTimeout,
    Unavailable,
    errno_reason,
    read_file,
)

log = structlog.get_logger("jobs")

SOURCE = "jobs_hpc"
HPC = JobSource("hpc", 40, spans_nodes=True)
"""dcgm-exporter's HPC job map: what the node's scheduler wrote per GPU, above a
launcher's word, below a Slurm cgroup's."""
MAX_FILES = 1024
MAX_FILE = 64 * 1024
MAX_JOBS = 64
LIST_TIMEOUT = 10.0
"""Seconds the listing may take: a directory of 100,000 entries lists in about 0.1 s on an
idle node, many times that on a loaded one (1 s, the reads' bound, failed 13 of 15 polls)."""

Inventory = Callable[[], tuple[Device, ...]]


class Fresh:
    """Counts and logs a recurring problem once when it appears, again only after it went
    away and came back (a file read every poll must not count its fault every poll)."""

    def __init__(self) -> None:
        self._seen: frozenset[tuple[str, str]] = frozenset()

    def __call__(self, problems: set[tuple[str, str]], errors: dict[str, int]) -> None:
        for reason, what in sorted(problems - self._seen):
            errors[reason] = errors.get(reason, 0) + 1
            log.warning("job_mapping_problem", reason=reason, what=what)
        self._seen = frozenset(problems)


def read_jobs(path: str) -> tuple[list[bytes], bool]:
    """The non-empty lines of one mapping file (at most :data:`MAX_JOBS`) and whether the
    file was cut at :data:`MAX_FILE` bytes or :data:`MAX_JOBS` lines."""
    data, cut = read_file(path, MAX_FILE)
    lines = data.splitlines()
    if cut:
        lines = lines[:-1]  # the last line may be a fragment
    jobs = [line.strip() for line in lines if line.strip()]
    return jobs[:MAX_JOBS], cut or len(jobs) > MAX_JOBS


class HpcJobMapSource(BlockingSource):
    """Publishes :class:`JobAssignments` (source ``hpc``) from the mapping directory."""

    name = SOURCE

    def __init__(self, directory: str, interval: float, inventory: Inventory) -> None:
        super().__init__()
        self.interval = interval
        self._dir = directory
        self._inventory = inventory
        self._fresh = Fresh()
        self._reader = Reader(f"source-{SOURCE}-read")
        self._known: dict[str, JobIdentity | None] = {}
        """GPU index -> the job its file said at its last read, kept while a read is stuck."""

    async def close(self) -> None:
        self._reader.stop()  # a poll waiting on a stuck read returns now
        await super().close()

    def poll_blocking(self) -> SourceResult:
        listed = self._reader.map(_list, [self._dir], timeout=LIST_TIMEOUT)[0]
        if not isinstance(listed, tuple):
            return self._failed(listed)
        names, links = listed
        problems: set[tuple[str, str]] = {
            ("not_regular_file", os.path.join(self._dir, name)) for name in links
        }
        if len(names) > MAX_FILES:
            problems.add(("too_many_files", self._dir))
            names = names[:MAX_FILES]
        by_index: dict[str, JobIdentity] = {}
        paths = [os.path.join(self._dir, name) for name in names]
        known: dict[str, JobIdentity | None] = {}
        for name, path, outcome in zip(
            names, paths, self._reader.map(read_jobs, paths), strict=True
        ):
            if isinstance(outcome, (ReadTimeout, Unavailable)):  # stuck: its last word stands
                problems.add(("read_timeout", path))
                job = self._known.get(name)
            else:
                job = self._job_of(path, outcome, problems)
            known[name] = job
            if job is not None:
                by_index[name] = job
        self._known = known
        errors: dict[str, int] = {}
        self._fresh(problems, errors)
        return SourceResult(source=SOURCE, errors=errors,
                            reading=JobAssignments(HPC.name, self._gpus(by_index)),
                            stuck_reads=self._reader.stuck())

    def _gpus(self, by_index: dict[str, JobIdentity]) -> dict[str, JobIdentity]:
        return {
            d.gpu: by_index[index]
            for d in self._inventory()
            if (index := d.gpu.split("-", 1)[0]) in by_index
        }

    def _failed(self, exc: BaseException) -> SourceResult:
        if isinstance(exc, (ReadTimeout, Unavailable)):
            reason, why = "read_timeout", (
                f"listing did not return in {LIST_TIMEOUT:.0f} s" if isinstance(exc, ReadTimeout)
                else "an earlier listing has not returned yet")
            # what each file said last is still the best word for its GPU
            last = {name: job for name, job in self._known.items() if job is not None}
            return SourceResult(
                source=SOURCE, ok=False, reason=reason,
                error=f"HPC job-mapping directory {self._dir}: {why}",
                reading=JobAssignments(HPC.name, self._gpus(last)),
                stuck_reads=self._reader.stuck(),
            )
        if isinstance(exc, OSError):
            reason = "permission_denied" if isinstance(exc, PermissionError) else "dir_missing"
            why = exc.strerror or str(exc)
        else:
            raise exc  # a bug: the scheduler turns it into a failed poll
        self._known = {}
        return SourceResult(
            source=SOURCE, ok=False, reason=reason,
            error=f"HPC job-mapping directory {self._dir}: {why}",
            reading=JobAssignments(HPC.name), stuck_reads=self._reader.stuck(),
        )

    def _job_of(
        self, path: str, outcome: object, problems: set[tuple[str, str]]
    ) -> JobIdentity | None:
        if isinstance(outcome, FileNotFoundError):  # removed by an epilog since the listing
            return None
        if isinstance(outcome, OSError):
            problems.add(("permission_denied" if isinstance(outcome, PermissionError)
                          else "unreadable" if errno_reason(outcome) != "read_not_regular"
                          else "not_regular_file", path))
            return None
        if not isinstance(outcome, tuple):
            raise outcome if isinstance(outcome, BaseException) else TypeError(outcome)
        raw, cut = outcome
        if cut:
            problems.add(("file_too_long", path))
        jobs = set()
        for line in raw:
            try:
                jobs.add(ident.checked(path, line))
            except ident.BadValue as exc:
                problems.add((exc.reason, path))
        if len(jobs) > 1:
            problems.add(("several_jobs", path))
        return HPC.identity(min(jobs)) if jobs else None


def _list(directory: str) -> tuple[list[str], list[str]]:
    """The GPU-index names of regular files in ``directory``, in numeric order, and the
    GPU-index names that are neither a file nor a directory (a symlink, never followed; a
    FIFO, a socket, a device). Directories and other names are skipped, as dcgm-exporter
    skips them."""
    files: list[str] = []
    links: list[str] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            if not (name.isascii() and name.isdigit() and len(name) <= 4):
                continue
            try:
                if entry.is_file(follow_symlinks=False):
                    files.append(name)
                elif not entry.is_dir(follow_symlinks=False):
                    links.append(name)
            except OSError:
                continue
    return sorted(files, key=int), sorted(links, key=int)
