"""The /proc source on a node built to be hostile ([identity], issue 38): reads that never
return, odd files where files should be, lying environments, reused pids. In each case the
source answers every poll, counts the drop, and no other process's job changes."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from exporter.readings import ProcessInfo
from exporter.sources.jobs import procfs
from exporter.sources.jobs.config import JobsConfig
from exporter.sources.jobs.identity import PROCESS, SLURM
from exporter.sources.jobs.procfs import ProcJobSource
from tests.jobs.test_procfs import NODE, jobs, proc, slurm_cgroup, source

BOUND = 0.3
"""The reader's bound in these tests (seconds)."""


FAILING: dict[str, int] = {}
"""Paths whose read fails with this errno, as the kernel's read() would (EISDIR, EIO)."""


@pytest.fixture
def stuck(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    """Paths whose read sleeps until the test ends (a process in D state): add to the set.
    Paths in :data:`FAILING` fail with their errno."""
    monkeypatch.setattr("exporter.sources.jobs.reader.READ_TIMEOUT", BOUND)
    paths: set[str] = set()
    release = threading.Event()
    real = procfs.read_file
    FAILING.clear()

    def sleepy(path: str, cap: int) -> tuple[bytes, bool]:
        if path in paths:
            release.wait()
        if path in FAILING:
            raise OSError(FAILING[path], os.strerror(FAILING[path]), path)
        return real(path, cap)

    monkeypatch.setattr(procfs, "read_file", sleepy)
    yield paths
    release.set()


def _other(tmp_path: Path) -> None:
    """Another tenant's Slurm job on GPU 1, which nothing below may change."""
    proc(tmp_path, 20, {"SLURM_JOB_ID": "900"}, cgroup=slurm_cgroup(900))


OTHER = SLURM.identity("900")


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("when", ["first", "later"])
@pytest.mark.parametrize("kind", ["fifo", "sleep", "eisdir", "eio", "directory"])
def test_a_bad_environ_skips_its_process_only(
    tmp_path: Path, stuck: set[str], kind: str, when: str
) -> None:
    _other(tmp_path)
    proc(tmp_path, 10, {"TORCHELASTIC_RUN_ID": "r"})
    environ = tmp_path / "10" / "environ"
    listed = [ProcessInfo("1", 20)]
    src = ProcJobSource(JobsConfig(), str(tmp_path), NODE, processes=lambda: tuple(listed))
    if when == "later":
        assert jobs(src.poll_blocking()) == {"1": OTHER}
    if kind == "fifo":
        _fifo(environ)
    elif kind == "sleep":
        stuck.add(str(environ))
    elif kind == "directory":
        environ.unlink()
        environ.mkdir()
    else:
        FAILING[str(environ)] = errno.EISDIR if kind == "eisdir" else errno.EIO
    listed.append(ProcessInfo("0", 10))
    started = time.monotonic()
    with capture_logs() as logs:
        result = src.poll_blocking()
    took = time.monotonic() - started
    reason = {"fifo": "read_not_regular", "sleep": "read_timeout", "eisdir": "read_eisdir",
              "eio": "read_eio", "directory": "read_not_regular"}[kind]
    assert result.ok and result.errors == {reason: 1}, result
    assert jobs(result) == {"1": OTHER}  # the other tenant unchanged, GPU 0 has no job
    assert took < BOUND * 4 + 1
    assert any(e["event"] in ("job_read_timeout", "job_process_skipped") for e in logs)
    again = src.poll_blocking()  # skipped until it changes: not read, not counted again
    assert again.ok and again.errors == {} and jobs(again) == {"1": OTHER}


def test_a_stuck_stat_at_the_first_poll_still_publishes(
    tmp_path: Path, stuck: set[str]
) -> None:
    _other(tmp_path)
    proc(tmp_path, 10)
    stuck.add(str(tmp_path / "10" / "stat"))
    src = source(tmp_path, [("1", 20), ("0", 10)])
    result = src.poll_blocking()
    assert result.ok and result.errors == {"read_timeout": 1}
    assert jobs(result) == {"1": OTHER}


def test_a_full_reader_pauses_new_reads_only(
    tmp_path: Path, stuck: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the cap of stuck threads, new processes wait; known ones keep their job and the
    poll succeeds."""
    monkeypatch.setattr("exporter.sources.jobs.reader.MAX_STUCK", 2)
    _other(tmp_path)
    for pid in (10, 11, 12):
        proc(tmp_path, pid)
        stuck.add(str(tmp_path / str(pid) / "environ"))
    listed = [ProcessInfo("1", 20)]
    src = ProcJobSource(JobsConfig(), str(tmp_path), NODE, processes=lambda: tuple(listed))
    assert jobs(src.poll_blocking()) == {"1": OTHER}
    listed += [ProcessInfo("2", 10), ProcessInfo("3", 11), ProcessInfo("4", 12)]
    result = src.poll_blocking()
    assert result.ok and result.errors == {"read_timeout": 2}
    assert jobs(result) == {"1": OTHER}
    again = src.poll_blocking()  # nothing stuck is read again, nothing counted again
    assert again.ok and again.errors == {} and jobs(again) == {"1": OTHER}


def test_a_symlinked_environ_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_bytes(b"SLURM_JOB_ID=1\0")
    proc(tmp_path, 10, cgroup="0::/slurm/uid_0/\n")
    (tmp_path / "10" / "environ").unlink()
    (tmp_path / "10" / "environ").symlink_to(secret)
    result = source(tmp_path, [("0", 10)]).poll_blocking()
    assert result.errors == {"read_eloop": 1} and jobs(result) == {}


def test_the_cgroup_outranks_the_environment(tmp_path: Path) -> None:
    """cgroup job 5000, environment 1000: the scheduler's word (5000), the claim counted."""
    proc(tmp_path, 10, {"SLURM_JOB_ID": "1000"}, cgroup=slurm_cgroup(5000))
    proc(tmp_path, 11, {"PMIX_NAMESPACE": "slurm.pmix.1000.0"}, cgroup=slurm_cgroup(5000))
    src = source(tmp_path, [("0", 10), ("1", 11)])
    with capture_logs() as logs:
        result = src.poll_blocking()
    assert jobs(result) == {"0": SLURM.identity("5000"), "1": SLURM.identity("5000")}
    assert result.errors == {"job_claim_refused": 2}
    refused = [e for e in logs if e["event"] == "job_claim_refused"]
    assert len(refused) == 2 and all("5000" in e["why"] for e in refused)
    assert src.poll_blocking().errors == {}  # counted and logged once


def test_a_claim_from_outside_slurm_joins_no_job(tmp_path: Path) -> None:
    """A process outside any Slurm cgroup claiming the victim's job 4242 is its own session,
    and the victim's job keeps exactly its own GPUs."""
    proc(tmp_path, 10, {"SLURM_JOB_ID": "4242"}, cgroup=slurm_cgroup(4242))
    proc(tmp_path, 11, {"SLURM_JOB_ID": "4242"}, cgroup=slurm_cgroup(4242))
    # the attacker: a user slice, a fake "slurmstepd" parent of its own uid, and a
    # launcher variable it hopes will be believed once the Slurm claim is dropped
    proc(tmp_path, 29, comm="slurmstepd", uid=1000)
    proc(tmp_path, 30, {"SLURM_JOB_ID": "4242", "TORCHELASTIC_RUN_ID": "x"}, ppid=29,
         start=77)
    src = source(tmp_path, [("0", 10), ("1", 11), ("2", 30)])
    with capture_logs() as logs:
        result = src.poll_blocking()
    got = jobs(result)
    assert got["0"] == got["1"] == SLURM.identity("4242")
    assert got["2"] == PROCESS.identity("n1/30-77")
    assert result.errors == {"job_claim_refused": 1}
    assert [e["variable"] for e in logs if e["event"] == "job_claim_refused"] == [
        "SLURM_JOB_ID"]


def test_a_claim_without_any_cgroup_is_believed_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.jobs.test_procfs import deny

    d = proc(tmp_path, 10, {"SLURM_JOB_ID": "12"})
    deny(monkeypatch, d / "cgroup")
    result = source(tmp_path, [("0", 10)]).poll_blocking()
    assert jobs(result) == {"0": SLURM.identity("12")}
    assert result.errors == {"permission_denied": 1, "job_claim_unverified": 1}


def test_a_pid_reused_within_one_interval_is_a_new_process(tmp_path: Path) -> None:
    proc(tmp_path, 10, {"SLURM_JOB_ID": "1"}, start=100, cgroup=slurm_cgroup(1))
    src = source(tmp_path, [("0", 10)])
    assert jobs(src.poll_blocking())["0"].job_id == "1"
    # the process ends and a new one takes its pid before the next poll: NVML lists it
    # without a break, only its start time tells
    proc(tmp_path, 10, {"SLURM_JOB_ID": "2"}, start=180, cgroup=slurm_cgroup(2))
    assert jobs(src.poll_blocking())["0"].job_id == "2"
