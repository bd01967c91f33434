"""Job identity from dcgm-exporter's HPC job-mapping directory (``--hpc-job-mapping-dir``).

Sites that already run dcgm-exporter with HPC job mapping have a scheduler prolog write, into
one directory, a file per GPU named by its index (``0``, ``1``, ...) holding the ids of the
jobs on that GPU, one per line; the epilog removes or empties it. dcgm-exporter skips
directories and names that are not integers, and so does this source. A GPU index also
covers its MIG instances (``<index>-<gpu instance>``), as dcgm-exporter labels them.

Bounded: at most :data:`MAX_FILES` files, :data:`MAX_FILE` bytes and :data:`MAX_JOBS` lines
of each; each job id passes the same check as the process source's values. Problems (an
unreadable file, a bad id, a GPU listing several jobs) are counted once each time they
appear, not on every poll.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import structlog

from exporter.readings import Device, JobAssignments, JobIdentity
from exporter.snapshot import SourceResult
from exporter.sources.base import BlockingSource
from exporter.sources.jobs import identity as ident

log = structlog.get_logger("jobs")

SOURCE = "jobs_hpc"
MAX_FILES = 1024
MAX_FILE = 64 * 1024
MAX_JOBS = 64

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
    with open(path, "rb") as f:
        data = f.read(MAX_FILE + 1)
    cut = len(data) > MAX_FILE
    lines = data[:MAX_FILE].splitlines()
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

    def poll_blocking(self) -> SourceResult:
        try:
            names = sorted(e.name for e in os.scandir(self._dir) if _is_gpu_file(e))
        except OSError as exc:
            reason = "permission_denied" if isinstance(exc, PermissionError) else "dir_missing"
            return SourceResult(
                source=SOURCE, ok=False, reason=reason,
                error=f"HPC job-mapping directory {self._dir}: {exc.strerror or exc}",
                reading=JobAssignments("hpc"),
            )
        problems: set[tuple[str, str]] = set()
        if len(names) > MAX_FILES:
            problems.add(("too_many_files", self._dir))
            names = names[:MAX_FILES]
        by_index: dict[str, JobIdentity] = {}
        for name in names:
            job = self._job_of(name, problems)
            if job is not None:
                by_index[name] = job
        errors: dict[str, int] = {}
        self._fresh(problems, errors)
        gpus = {
            d.gpu: by_index[index]
            for d in self._inventory()
            if (index := d.gpu.split("-", 1)[0]) in by_index
        }
        return SourceResult(source=SOURCE, errors=errors, reading=JobAssignments("hpc", gpus))

    def _job_of(self, name: str, problems: set[tuple[str, str]]) -> JobIdentity | None:
        path = os.path.join(self._dir, name)
        try:
            raw, cut = read_jobs(path)
        except FileNotFoundError:  # removed by an epilog since the listing
            return None
        except OSError as exc:
            problems.add(("permission_denied" if isinstance(exc, PermissionError)
                          else "unreadable", path))
            return None
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
        return JobIdentity("hpc", min(jobs)) if jobs else None


def _is_gpu_file(entry: os.DirEntry[str]) -> bool:
    name = entry.name
    try:
        return name.isascii() and name.isdigit() and len(name) <= 4 and entry.is_file()
    except OSError:
        return False
