"""A stuck read costs only itself ([identity-2], issue 47): a GPU's hung processes leave
every other GPU its job and the source up; a stuck mapping file leaves the other GPUs
theirs; nothing stuck is read again before its earlier read ends; the count is a metric."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.readings import Device, JobAssignments, ProcessInfo
from exporter.sources.jobs import hpc, procfs, reader
from exporter.sources.jobs.config import JobsConfig
from exporter.sources.jobs.identity import SLURM
from exporter.sources.jobs.procfs import ProcJobSource
from tests.jobs.test_procfs import NODE, jobs, proc, slurm_cgroup

BOUND = 0.2
HEALTHY = {str(gpu): SLURM.identity(str(900 + gpu)) for gpu in range(1, 12)}
"""GPUs 1-11: a job each, which nothing stuck on GPU 0 may take away."""


@pytest.fixture
def blocked(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[set[str], list[str]]]:
    """(paths whose read blocks until the test ends, the paths read in order)."""
    monkeypatch.setattr(reader, "READ_TIMEOUT", BOUND)
    paths: set[str] = set()
    calls: list[str] = []
    release = threading.Event()
    real = procfs.read_file  # type: ignore[attr-defined]

    def sleepy(path: str, cap: int) -> tuple[bytes, bool]:
        calls.append(path)
        if path in paths:
            release.wait()
        return real(path, cap)

    monkeypatch.setattr(procfs, "read_file", sleepy)
    yield paths, calls
    release.set()


def _healthy(root: Path) -> list[ProcessInfo]:
    listed = []
    for gpu in range(1, 12):
        pid = 5000 + gpu
        proc(root, pid, {"SLURM_JOB_ID": str(900 + gpu)}, cgroup=slurm_cgroup(900 + gpu))
        listed.append(ProcessInfo(str(gpu), pid))
    return listed


@pytest.mark.parametrize("healthy_first", [True, False])
def test_200_stuck_environ_reads_leave_every_healthy_gpu_its_job(
    tmp_path: Path, blocked: tuple[set[str], list[str]], healthy_first: bool
) -> None:
    """A hung job's 200 processes on GPU 0 whose ``environ`` read blocks: on main, at 8
    abandoned readers every poll failed and every GPU lost its job (``up`` 0)."""
    paths, calls = blocked
    listed = _healthy(tmp_path)
    src = ProcJobSource(JobsConfig(), str(tmp_path), NODE, processes=lambda: tuple(listed))
    if healthy_first:
        assert jobs(src.poll_blocking()) == HEALTHY
    for pid in range(100, 300):  # lower pids than the healthy: read first
        proc(tmp_path, pid, {"SLURM_JOB_ID": "77"}, cgroup=slurm_cgroup(77))
        paths.add(str(tmp_path / str(pid) / "environ"))
        listed.append(ProcessInfo("0", pid))
    for poll in range(5):
        started = time.monotonic()
        result = src.poll_blocking()
        assert result.ok, result.error  # goodput_exporter_source_up 1
        assert jobs(result) == HEALTHY, poll
        assert time.monotonic() - started < BOUND * 3 + 1
    assert result.errors == {}  # the stuck one counted once, at its first poll
    assert result.stuck_reads == 1  # goodput_exporter_source_reads_stuck
    environ_reads = [p for p in calls
                     if p.endswith("/environ") and int(Path(p).parent.name) < 5000]
    assert environ_reads == [str(tmp_path / "100" / "environ")]  # one thread, once


def test_a_stuck_process_is_read_again_once_its_read_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader, "READ_TIMEOUT", BOUND)
    release = threading.Event()
    real = procfs.read_file  # type: ignore[attr-defined]
    environ = str(tmp_path / "10" / "environ")

    def sleepy(path: str, cap: int) -> tuple[bytes, bool]:
        if path == environ:
            release.wait()
        return real(path, cap)

    monkeypatch.setattr(procfs, "read_file", sleepy)
    proc(tmp_path, 10, {"SLURM_JOB_ID": "5"}, cgroup=slurm_cgroup(5))
    listed = (ProcessInfo("0", 10),)
    src = ProcJobSource(JobsConfig(), str(tmp_path), NODE, processes=lambda: listed)
    first = src.poll_blocking()
    assert first.ok and first.errors == {"read_timeout": 1} and jobs(first) == {}
    assert first.stuck_reads == 1
    assert jobs(src.poll_blocking()) == {}  # still stuck: not read again
    release.set()  # the process leaves D state
    deadline = time.monotonic() + 5
    while src._reader.stuck() and time.monotonic() < deadline:
        time.sleep(0.02)
    monkeypatch.setattr(procfs, "read_file", real)
    assert jobs(src.poll_blocking()) == {"0": SLURM.identity("5")}


INVENTORY = tuple(Device(str(i), f"GPU-{i}") for i in range(4))


def test_one_stuck_mapping_file_leaves_the_other_gpus_theirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On main the stuck file was read again every poll while its earlier read was still
    stuck, and within 8 polls the source failed with no GPU's job."""
    monkeypatch.setattr(reader, "READ_TIMEOUT", BOUND)
    release = threading.Event()
    real = hpc.read_jobs
    stuck = str(tmp_path / "0")
    reads: list[str] = []

    def sleepy(path: str) -> tuple[list[bytes], bool]:
        reads.append(path)
        if path == stuck and release_after_first.is_set():
            release.wait()
        return real(path)

    release_after_first = threading.Event()
    monkeypatch.setattr(hpc, "read_jobs", sleepy)
    for gpu in range(4):
        (tmp_path / str(gpu)).write_text(f"{100 + gpu}\n")
    src = hpc.HpcJobMapSource(str(tmp_path), 1.0, lambda: INVENTORY)
    expected = {str(gpu): hpc.HPC.identity(str(100 + gpu)) for gpu in range(4)}
    try:
        assert src.poll_blocking().get(JobAssignments).gpus == expected  # type: ignore[union-attr]
        release_after_first.set()  # the file system under GPU 0's file hangs
        for poll in range(12):
            result = src.poll_blocking()
            assert result.ok, (poll, result.error)
            assert result.get(JobAssignments).gpus == expected, poll  # type: ignore[union-attr]
            assert result.errors == ({"read_timeout": 1} if poll == 0 else {})
            assert result.stuck_reads == 1
        assert reads.count(stuck) == 2  # once fine, once stuck: never again while stuck
    finally:
        release.set()


def test_the_listing_has_its_own_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing slower than a read's bound (100,000 entries on a loaded node) still
    succeeds: on main it shared the reads' 1 s and failed."""
    monkeypatch.setattr(reader, "READ_TIMEOUT", BOUND)
    real = hpc._list

    def slow(directory: str) -> tuple[list[str], list[str]]:
        time.sleep(BOUND * 3)
        return real(directory)

    monkeypatch.setattr(hpc, "_list", slow)
    (tmp_path / "1").write_text("7\n")
    result = hpc.HpcJobMapSource(str(tmp_path), 1.0, lambda: INVENTORY).poll_blocking()
    assert result.ok and result.get(JobAssignments).gpus == {"1": hpc.HPC.identity("7")}  # type: ignore[union-attr]
    assert hpc.LIST_TIMEOUT >= 10 * reader.READ_TIMEOUT
