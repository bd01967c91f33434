"""The /proc job-identity source over fake proc trees: Slurm (environment, cgroup v1 and v2),
MPI, torchrun, plain sessions, hostile environments, vanished and unreadable processes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from exporter.readings import JobAssignments, JobIdentity, ProcessInfo
from exporter.snapshot import SourceResult
from exporter.sources.jobs import identity as ident
from exporter.sources.jobs import procfs
from exporter.sources.jobs.config import JobsConfig
from exporter.sources.jobs.identity import MPI, PROCESS, SLURM, TORCHRUN
from exporter.sources.jobs.procfs import MAX_ENVIRON, ProcJobSource

NODE = "n1"
SECRET = "hunter2-never-published"
USER_CGROUP = "0::/user.slice/user-1000.slice/session-3.scope\n"


def slurm_cgroup(job: str | int) -> str:
    """slurmstepd's cgroup v2 path for a task of ``job``."""
    return f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n"


def proc(
    root: Path,
    pid: int,
    env: dict[str, str] | bytes = b"",
    cgroup: str = USER_CGROUP,
    session: int | None = None,
    start: int = 500,
    ppid: int = 1,
    comm: str = "py (worker) 1",
    uid: int = 1000,
    cmdline: bytes = b"python\0train.py\0",
) -> Path:
    """One fake /proc/<pid>: stat, status, cgroup, cmdline, environ (a dict, or raw bytes).
    A pid written again is a new process, as the kernel makes it: a new directory (so a
    new inode, which is how the source tells a reused pid)."""
    d = root / str(pid)
    if d.exists():
        old = root / f"{pid}.old"
        d.rename(old)
        d.mkdir(parents=True)
        shutil.rmtree(old)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cmdline").write_bytes(cmdline)
    sid = pid if session is None else session
    fields = ["S", str(ppid), str(sid), str(sid), "0", "-1", "4194560", *["0"] * 12,
              str(start), "0"]
    (d / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")
    (d / "status").write_text(f"Name:\t{comm[:15]}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "cgroup").write_text(cgroup)
    raw = env if isinstance(env, bytes) else b"".join(
        f"{k}={v}\0".encode() for k, v in {"HOME": "/root", "API_KEY": SECRET, **env}.items()
    )
    (d / "environ").write_bytes(raw)
    return d


def source(root: Path, processes: list[tuple[str, int]], **config: object) -> ProcJobSource:
    listed = tuple(ProcessInfo(gpu, pid) for gpu, pid in processes)
    return ProcJobSource(JobsConfig(**config), str(root), NODE, processes=lambda: listed)


def jobs(result: SourceResult) -> dict[str, JobIdentity]:
    reading = result.get(JobAssignments)
    assert reading is not None
    return dict(reading.gpus)


def test_slurm_from_the_environment_joins_gpus_of_one_job(tmp_path: Path) -> None:
    # proctrack/linuxproc: no job cgroup, the tasks are slurmstepd's (root's) children
    proc(tmp_path, 9, comm="slurmstepd", uid=0, cmdline=b"slurmstepd: [777.0]\0")
    proc(tmp_path, 10, {"SLURM_JOB_ID": "777", "SLURM_PROCID": "0"}, ppid=9)
    proc(tmp_path, 11, {"SLURM_JOB_ID": "777", "SLURM_PROCID": "1"}, ppid=9)
    result = source(tmp_path, [("0", 10), ("1", 11)]).poll_blocking()
    assert result.ok and not result.errors
    assert jobs(result) == {"0": SLURM.identity("777"), "1": SLURM.identity("777")}


@pytest.mark.parametrize(
    "cgroup",
    [
        # cgroup v1: one line per hierarchy
        "12:pids:/slurm/uid_1000/job_4242/step_0/task_1\n"
        "4:memory:/slurm/uid_1000/job_4242/step_0/task_1\n1:name=systemd:/system.slice\n",
        # cgroup v2: the unified hierarchy under slurmstepd's scope
        "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_1\n",
        # several slurmd per host (multiple-slurmd builds)
        "0::/system.slice/node7_slurmstepd.scope/job_4242/step_batch/user/task_0\n",
    ],
)
def test_slurm_from_the_cgroup_without_the_environment(tmp_path: Path, cgroup: str) -> None:
    proc(tmp_path, 10, cgroup=cgroup)
    result = source(tmp_path, [("0", 10)], environ=False).poll_blocking()
    assert jobs(result) == {"0": SLURM.identity("4242")}


def test_a_job_directory_outside_slurm_is_not_a_slurm_job() -> None:
    assert ident.slurm_job_of_cgroup("0::/system.slice/cron/job_12/x\n") is None
    assert ident.slurm_job_of_cgroup("0::/slurm/uid_1/job_x12/\n") is None


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"PMIX_NAMESPACE": "prterun-host-2211@1", "OMPI_COMM_WORLD_RANK": "0"},
         MPI.identity("prterun-host-2211@1")),
        ({"OMPI_MCA_ess_base_jobid": "3126001665"}, MPI.identity("3126001665")),
        ({"TORCHELASTIC_RUN_ID": "c2a1f0e6-run", "LOCAL_RANK": "0"},
         TORCHRUN.identity("c2a1f0e6-run")),
        # srun --mpi=pmix sets both: the scheduler's id wins over the launcher's
        ({"PMIX_NAMESPACE": "slurm.pmix.99.0", "SLURM_JOB_ID": "99",
          "TORCHELASTIC_RUN_ID": "r1"}, SLURM.identity("99")),
        ({"TORCHELASTIC_RUN_ID": "r1", "PMIX_NAMESPACE": "ns"}, MPI.identity("ns")),
    ],
)
def test_launcher_variables(tmp_path: Path, env: dict[str, str], expected: JobIdentity) -> None:
    proc(tmp_path, 10, env, cgroup=slurm_cgroup(99) if "SLURM_JOB_ID" in env else USER_CGROUP)
    assert jobs(source(tmp_path, [("0", 10)]).poll_blocking()) == {"0": expected}


def test_plain_processes_are_their_session(tmp_path: Path) -> None:
    proc(tmp_path, 100, start=900)  # the session leader (a shell, no GPU)
    proc(tmp_path, 101, session=100, start=950)
    proc(tmp_path, 102, session=100, start=951)
    proc(tmp_path, 200, session=300, start=1000)  # its leader has exited
    # torchrun's default --rdzv-id names no job: the session does
    proc(tmp_path, 400, {"TORCHELASTIC_RUN_ID": "none"}, start=7)
    proc(tmp_path, 500, session=0, start=8)  # its session is outside our PID namespace
    listed = [("0", 101), ("1", 102), ("2", 200), ("3", 400), ("4", 500)]
    got = jobs(source(tmp_path, listed).poll_blocking())
    assert got == {
        "0": PROCESS.identity("n1/100-900"),
        "1": PROCESS.identity("n1/100-900"),
        "2": PROCESS.identity("n1/300"),
        "3": PROCESS.identity("n1/400-7"),
        "4": PROCESS.identity("n1/500-8"),
    }


def test_the_ranks_torchrun_starts_in_sessions_of_their_own_are_one_job(tmp_path: Path) -> None:
    """torchrun's agent (in the shell's session, leading none) starts each worker in a new
    session: the workers are its session's job, as spawned ranks would be. A terminal
    multiplexer's panes (sessions under a server that leads its own) stay apart."""
    proc(tmp_path, 100, start=900)  # the shell
    proc(tmp_path, 600, session=100, start=960, ppid=100)  # torchrun's agent, no GPU
    proc(tmp_path, 601, start=961, ppid=600)  # worker: leads its own session
    proc(tmp_path, 602, start=962, ppid=600)
    proc(tmp_path, 700, start=10)  # a tmux server: leads its session
    proc(tmp_path, 701, start=11, ppid=700)  # a pane's program: its own session
    proc(tmp_path, 702, start=12, ppid=700)
    # a launcher that leads its own session under a daemon's child (srun's slurmstepd)
    proc(tmp_path, 800, start=20)  # the daemon (child of init)
    proc(tmp_path, 810, start=21, ppid=800)  # torchrun, its own session
    proc(tmp_path, 811, start=22, ppid=810)  # its workers, each their own session
    proc(tmp_path, 812, start=23, ppid=810)
    listed = [("0", 601), ("1", 602), ("2", 701), ("3", 702), ("4", 811), ("5", 812)]
    got = jobs(source(tmp_path, listed, environ=False).poll_blocking())
    assert got == {
        "0": PROCESS.identity("n1/100-900"),
        "1": PROCESS.identity("n1/100-900"),
        "2": PROCESS.identity("n1/701-11"),
        "3": PROCESS.identity("n1/702-12"),
        "4": PROCESS.identity("n1/810-21"),
        "5": PROCESS.identity("n1/810-21"),
    }


def test_nothing_but_the_job_id_is_published(tmp_path: Path) -> None:
    proc(tmp_path, 10, {"SLURM_JOB_ID": "5", "SLURM_JOB_ACCOUNT": "secret-acct"})
    with capture_logs() as logs:
        result = source(tmp_path, [("0", 10)]).poll_blocking()
    text = repr(result) + repr(logs)
    assert SECRET not in text and "secret-acct" not in text and "/root" not in text


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"9" * (ident.MAX_VALUE + 1), "value_too_long"),
        (b'12"} 1\ngoodput_fake 1', "value_invalid"),
        (b"\xff\xfe", "value_invalid"),
        (b"", "value_invalid"),
    ],
)
def test_a_bad_value_is_dropped_and_counted(tmp_path: Path, value: bytes, reason: str) -> None:
    proc(tmp_path, 10, b"HOME=/\0SLURM_JOB_ID=" + value + b"\0", session=10, start=3)
    src = source(tmp_path, [("0", 10)])
    with capture_logs() as logs:
        result = src.poll_blocking()
    assert result.errors == {reason: 1}
    assert jobs(result) == {"0": PROCESS.identity("n1/10-3")}  # falls through
    assert [e["variable"] for e in logs if e["event"] == "job_variable_dropped"] == [
        "SLURM_JOB_ID"
    ]
    assert src.poll_blocking().errors == {}  # cached: counted once, not every poll


def test_an_oversized_environment_is_read_to_its_cap_only(tmp_path: Path) -> None:
    padding = b"X=" + b"a" * (4 * MAX_ENVIRON) + b"\0"
    proc(tmp_path, 10, b"SLURM_JOB_ID=31\0" + padding + b"TORCHELASTIC_RUN_ID=late\0",
         cgroup=slurm_cgroup(31))
    proc(tmp_path, 11, padding[: MAX_ENVIRON - 4] + b"\0SLURM_JOB_ID=123456789\0")
    result = source(tmp_path, [("0", 10), ("1", 11)]).poll_blocking()
    assert result.errors == {"environ_too_long": 2}
    got = jobs(result)
    assert got["0"] == SLURM.identity("31")
    assert got["1"].source == "process"  # the cut entry "SLURM_JOB_ID=12" is not trusted


def test_a_variable_name_only_prefixed_like_ours_is_not_read(tmp_path: Path) -> None:
    proc(tmp_path, 10, {"SLURM_JOB_ID_X": "1", "XSLURM_JOB_ID": "2"}, start=4)
    assert jobs(source(tmp_path, [("0", 10)]).poll_blocking())["0"].source == "process"


def test_a_process_gone_between_listing_and_reading(tmp_path: Path) -> None:
    proc(tmp_path, 10, {"SLURM_JOB_ID": "1"}, cgroup=slurm_cgroup(1))
    result = source(tmp_path, [("0", 10), ("1", 11)]).poll_blocking()
    assert result.ok and result.errors == {"pid_gone": 1}
    assert jobs(result) == {"0": SLURM.identity("1")}


def test_no_listed_process_exists_means_no_host_pid(tmp_path: Path) -> None:
    result = source(tmp_path, [("0", 10)]).poll_blocking()
    assert not result.ok and result.reason == "no_host_pid"
    missing = source(tmp_path / "nope", [("0", 10)]).poll_blocking()
    assert missing.reason == "proc_missing"


def deny(monkeypatch: pytest.MonkeyPatch, *paths: Path) -> None:
    """Make ``paths`` unreadable: chmod 000, and for root (which reads those anyway) the
    kernel's answer for another uid's environ without CAP_SYS_PTRACE."""
    for path in paths:
        path.chmod(0)
    if os.geteuid() != 0:
        return
    denied = {str(p) for p in paths}
    real = procfs.read_file

    def guarded(path: str, cap: int) -> tuple[bytes, bool]:
        if str(path) in denied:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, cap)

    monkeypatch.setattr(procfs, "read_file", guarded)


def test_an_unreadable_environment_falls_back_and_is_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = proc(tmp_path, 10, {"SLURM_JOB_ID": "1"}, cgroup=slurm_cgroup(8))
    proc(tmp_path, 11, {"SLURM_JOB_ID": "2"}, cgroup="0::/system.slice/slurmstepd.scope/system\n")
    deny(monkeypatch, d / "environ", tmp_path / "11" / "environ")
    src = source(tmp_path, [("0", 10), ("1", 11)])
    with capture_logs() as logs:
        result = src.poll_blocking()
    assert result.errors == {"environ_denied": 2}
    assert jobs(result)["0"] == SLURM.identity("8")  # the cgroup still tells
    assert jobs(result)["1"].source == "process"
    assert [e["event"] for e in logs].count("job_environ") == 1
    assert src.poll_blocking().errors == {}


def test_cache_reads_a_process_once_and_a_reused_pid_again(tmp_path: Path) -> None:
    proc(tmp_path, 10, {"SLURM_JOB_ID": "1"}, start=100, cgroup=slurm_cgroup(1))
    listed = [ProcessInfo("0", 10)]
    src = ProcJobSource(JobsConfig(), str(tmp_path), NODE, processes=lambda: tuple(listed))
    assert jobs(src.poll_blocking())["0"].job_id == "1"
    (tmp_path / "10" / "environ").write_bytes(b"SLURM_JOB_ID=2\0")
    assert jobs(src.poll_blocking())["0"].job_id == "1"  # listed throughout: cached
    listed.clear()  # the process ended; NVML no longer lists it
    assert jobs(src.poll_blocking()) == {}
    proc(tmp_path, 10, {"SLURM_JOB_ID": "3"}, start=200, cgroup=slurm_cgroup(3))  # reused
    listed.append(ProcessInfo("0", 10))
    assert jobs(src.poll_blocking())["0"].job_id == "3"


def test_several_jobs_on_one_gpu_pick_the_strongest_and_count_once(tmp_path: Path) -> None:
    proc(tmp_path, 10, {"SLURM_JOB_ID": "20"}, cgroup=slurm_cgroup(20))
    proc(tmp_path, 11, {"SLURM_JOB_ID": "10"}, cgroup=slurm_cgroup(10))
    proc(tmp_path, 12, {"TORCHELASTIC_RUN_ID": "a"})
    src = source(tmp_path, [("0", 12), ("0", 10), ("0", 11)])
    with capture_logs() as logs:
        first = src.poll_blocking()
    assert jobs(first) == {"0": SLURM.identity("10")}
    assert first.errors == {"several_jobs": 1}
    assert [e["event"] for e in logs].count("gpu_shared_by_jobs") == 1
    assert src.poll_blocking().errors == {}


def test_stat_with_a_hostile_command_name() -> None:
    text = "5 (a) b) c (d) R 1 2 3 " + " ".join(["0"] * 15) + " 42 0\n"
    stat = ident.parse_stat(text)
    assert stat == ident.Stat(session=3, start_ticks=42, ppid=1, comm="a) b) c (d")
    assert ident.parse_stat("garbage") is None
    assert ident.parse_stat("1 (x) S 1 2 notanumber " + "0 " * 20) is None


@pytest.mark.parametrize("others", [0, 60], ids=["listing", "stat-per-pid"])
def test_a_reused_or_ended_pid_is_told_without_reading_it(tmp_path: Path, others: int) -> None:
    """Known processes are not read again: the /proc/<pid> inode (a listing, or a stat per
    pid when they are few among many processes) tells a new process under an old pid."""
    for pid in range(1000, 1000 + others):  # the node's other processes
        (tmp_path / str(pid)).mkdir()
    proc(tmp_path, 10, {"SLURM_JOB_ID": "1"}, cgroup=slurm_cgroup(1))
    proc(tmp_path, 11, {"SLURM_JOB_ID": "5"}, cgroup=slurm_cgroup(5))
    src = source(tmp_path, [("0", 10), ("1", 11)])
    for _ in range(2):  # the first poll learns the node's size
        assert jobs(src.poll_blocking()) == {"0": SLURM.identity("1"), "1": SLURM.identity("5")}
    (tmp_path / "10" / "environ").write_bytes(b"SLURM_JOB_ID=9\0")  # not read again
    proc(tmp_path, 11, {"SLURM_JOB_ID": "2"}, cgroup=slurm_cgroup(2))  # pid 11 reused
    assert jobs(src.poll_blocking()) == {"0": SLURM.identity("1"), "1": SLURM.identity("2")}
    shutil.rmtree(tmp_path / "11")
    result = src.poll_blocking()
    assert jobs(result) == {"0": SLURM.identity("1")} and result.errors == {"pid_gone": 1}
