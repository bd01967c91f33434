"""Slurm evidence on this machine's real kernel ([identity-2], issue 47): a cgroup v2
subtree delegated to a user the way systemd delegates ``user@<uid>.service`` (the
directory and its ``cgroup.procs``, ``cgroup.threads`` and ``cgroup.subtree_control``
chowned to the user), where the user makes ``slurm/job_4242`` and moves their own process
in. The /proc source reads the real ``/proc/<pid>/cgroup`` and refuses it; a root-made
``system.slice/slurmstepd.scope/job_<id>`` under a site prefix is believed, and one whose
directory a user owns is refused by its owner. Skipped, with the reason, where the machine
does not allow it (not root, no writable cgroup v2)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.readings import JobAssignments, ProcessInfo
from exporter.sources.jobs.config import JobsConfig
from exporter.sources.jobs.identity import PROCESS, SLURM
from exporter.sources.jobs.procfs import ProcJobSource, cgroup_mounts

USER = 65534  # nobody: a plain user
DELEGATED_FILES = ("cgroup.procs", "cgroup.threads", "cgroup.subtree_control")


def _why_not() -> str:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root to make and delegate cgroups"
    mount = cgroup_mounts().get("")
    if mount is None:
        return "no cgroup v2 hierarchy mounted at its root here"
    own = Path("/proc/self/cgroup").read_text()
    line = next((x for x in own.splitlines() if x.startswith("0::")), None)
    if line is None or not (Path(mount) / line[3:].lstrip("/")).is_dir():
        return "the cgroup v2 mount is not this process's cgroup namespace"
    probe = Path(mount) / f"goodput-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        return f"cannot make a cgroup under {mount}: {exc.strerror}"
    return ""


WHY_NOT = _why_not()
pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT or "runs")


@pytest.fixture
def tree() -> Iterator[tuple[Path, str]]:
    """(the test's cgroup directory, its path as /proc/<pid>/cgroup writes it); removed,
    leaves first, once its processes are gone."""
    mount = Path(cgroup_mounts()[""])
    name = f"goodput-test-{uuid.uuid4().hex[:8]}"
    base = mount / name
    base.mkdir()
    children: list[subprocess.Popen[bytes]] = []
    try:
        yield base, f"/{name}"
    finally:
        for child in children:
            child.kill()
        for d in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            _empty(d)
            d.rmdir()
        _empty(base)
        base.rmdir()


def _empty(cgroup: Path) -> None:
    """Kill what is left in a cgroup (its processes are this test's)."""
    procs = cgroup / "cgroup.procs"
    for pid in procs.read_text().split() if procs.exists() else []:
        try:
            os.kill(int(pid), 9)
            os.waitpid(int(pid), 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _delegate(cgroup: Path, uid: int) -> None:
    """What systemd does for ``Delegate=yes``: the directory and three files to the user."""
    os.chown(cgroup, uid, uid)
    for name in DELEGATED_FILES:
        os.chown(cgroup / name, uid, uid)


def _start(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "120"], user=USER, group=USER, env=env,
                            start_new_session=True)


def _poll(pids: dict[str, int], **config: object) -> tuple[dict[str, object], dict[str, int]]:
    listed = tuple(ProcessInfo(gpu, pid) for gpu, pid in pids.items())
    src = ProcJobSource(JobsConfig(**config), "/proc", "n1", processes=lambda: listed)
    result = src.poll_blocking()
    reading = result.get(JobAssignments)
    assert reading is not None and result.ok, result.error
    return dict(reading.gpus), dict(result.errors)


def test_a_slurm_job_made_in_a_user_delegated_subtree_is_refused(
    tree: tuple[Path, str]
) -> None:
    base, _ = tree
    service = base / "user.slice" / f"user-{USER}.slice" / f"user@{USER}.service"
    service.mkdir(parents=True)
    _delegate(service, USER)
    child = _start({"SLURM_JOB_ID": "4242", "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    try:
        (service / "cgroup.procs").write_text(str(child.pid))  # as systemd starts user@
        forged = service / "slurm" / "job_4242"
        made = subprocess.run(  # the user, on their own: no privilege beyond delegation
            ["sh", "-c", f'mkdir -p "{forged}" && echo {child.pid} > "{forged}/cgroup.procs"'],
            user=USER, group=USER, capture_output=True, text=True, check=False)
        assert made.returncode == 0, made.stderr
        seen = Path(f"/proc/{child.pid}/cgroup").read_text()
        assert f"user@{USER}.service/slurm/job_4242" in seen
        for environ, errors in ((False, {"slurm_cgroup_refused": 1}),
                                (True, {"slurm_cgroup_refused": 1, "job_claim_refused": 1})):
            gpus, counted = _poll({"0": child.pid}, environ=environ)
            assert gpus["0"].source == PROCESS.name  # type: ignore[attr-defined]
            assert counted == errors
    finally:
        child.kill()
        child.wait()


def test_root_made_job_cgroups_under_a_site_prefix_and_their_owner(
    tree: tuple[Path, str]
) -> None:
    base, prefix = tree
    scope = base / "system.slice" / "slurmstepd.scope"
    real, delegated = scope / "job_77", scope / "job_78"
    real.mkdir(parents=True)
    delegated.mkdir()
    _delegate(delegated, USER)  # as if some unit under it were delegated to a user
    path_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    first, second = _start(path_env), _start(path_env)
    try:
        (real / "cgroup.procs").write_text(str(first.pid))
        (delegated / "cgroup.procs").write_text(str(second.pid))
        gpus, counted = _poll({"0": first.pid, "1": second.pid}, environ=False,
                              slurm_cgroup_prefix=prefix)
        assert gpus["0"] == SLURM.identity("77")
        assert gpus["1"].source == "process"  # type: ignore[attr-defined]
        assert counted == {"slurm_cgroup_refused": 1}
        gpus, counted = _poll({"0": first.pid}, environ=False)  # no prefix: not anchored
        assert gpus["0"].source == "process"  # type: ignore[attr-defined]
    finally:
        for child in (first, second):
            child.kill()
            child.wait()


def test_a_reused_pid_has_a_new_proc_inode() -> None:
    """What the source tells a reused pid by: a new process under an old pid gets a new
    ``/proc/<pid>`` inode (needs ``ns_last_pid``, root in its own PID namespace)."""
    last_pid = Path("/proc/sys/kernel/ns_last_pid")
    first = subprocess.Popen(["sleep", "30"])
    pid = first.pid
    inode = next(e.inode() for e in os.scandir("/proc") if e.name == str(pid))
    first.kill()
    first.wait()
    try:
        last_pid.write_text(str(pid - 1))
        second = subprocess.Popen(["sleep", "30"])
    except OSError as exc:
        pytest.skip(f"cannot choose the next pid here: {exc.strerror}")
    try:
        if second.pid != pid:
            pytest.skip("another process took the pid first (a busy machine)")
        again = next(e.inode() for e in os.scandir("/proc") if e.name == str(pid))
        assert again != inode
    finally:
        second.kill()
        second.wait()


