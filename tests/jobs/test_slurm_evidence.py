"""Slurm evidence a user cannot forge ([identity-2], issue 47): only the cgroup paths
slurmd's own plugins create name a Slurm job, and a root slurmstepd vouches for its own job
only. Every refused claim is counted and logged once, with its reason."""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from exporter.readings import ProcessInfo
from exporter.sources.jobs import identity as ident
from exporter.sources.jobs.config import JobsConfig
from exporter.sources.jobs.identity import PROCESS, SLURM
from exporter.sources.jobs.procfs import ProcJobSource
from tests.jobs.test_procfs import NODE, jobs, proc, slurm_cgroup, source

DELEGATED = "0::/user.slice/user-1000.slice/user@1000.service"
"""The subtree systemd delegates to user 1000 (cgroup v2): the user may create anything
below it and move their own processes there."""


def _refused(logs: list[MutableMapping[str, Any]], event: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == event]


@pytest.mark.parametrize("environ", [False, True])
def test_a_forged_slurm_job_in_a_delegated_subtree_is_refused(
    tmp_path: Path, environ: bool
) -> None:
    """A user made ``slurm/job_4242`` in their own delegated subtree and moved a process
    in: on main the GPU was published as Slurm job 4242, even with ``jobs.environ`` off."""
    proc(tmp_path, 10, {"SLURM_JOB_ID": "4242"} if environ else {}, start=7,
         cgroup=f"{DELEGATED}/slurm/job_4242/step_0/task_0\n")
    proc(tmp_path, 11, cgroup=slurm_cgroup(4242))  # the real job
    src = source(tmp_path, [("0", 10), ("1", 11)], environ=environ)
    with capture_logs() as logs:
        result = src.poll_blocking()
    got = jobs(result)
    assert got["0"] == PROCESS.identity("n1/10-7")
    assert got["1"] == SLURM.identity("4242")
    expected = {"slurm_cgroup_refused": 1}
    if environ:
        expected["job_claim_refused"] = 1
    assert result.errors == expected
    [line] = _refused(logs, "slurm_cgroup_refused")
    assert line["pid"] == 10 and "delegates to a user" in str(line["why"])
    assert src.poll_blocking().errors == {}  # counted and logged once


@pytest.mark.parametrize(
    "cgroup",
    [
        f"{DELEGATED}/app.slice/slurm-x.scope\n",
        "0::/user.slice/user-1000.slice/session-4.scope/slurm\n",
        # slurmd's own path, rebuilt inside the user's subtree
        f"{DELEGATED}/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n",
        # v1 layout on the v2 line, or anywhere but a hierarchy's root
        "0::/slurm/uid_1000/job_4242/step_0\n",
        "4:memory:/user.slice/slurm/uid_1000/job_4242/step_0\n",
    ],
)
def test_a_slurm_named_scope_claiming_a_job_is_refused(tmp_path: Path, cgroup: str) -> None:
    """A user scope named ``slurm-x.scope`` plus ``SLURM_JOB_ID=4242``: on main believed
    silently."""
    proc(tmp_path, 10, {"SLURM_JOB_ID": "4242", "TORCHELASTIC_RUN_ID": "r"}, start=7,
         cgroup=cgroup)
    src = source(tmp_path, [("0", 10)])
    with capture_logs() as logs:
        result = src.poll_blocking()
    assert jobs(result) == {"0": PROCESS.identity("n1/10-7")}
    assert result.errors == {"slurm_cgroup_refused": 1, "job_claim_refused": 1}
    assert len(_refused(logs, "slurm_cgroup_refused")) == 1
    assert len(_refused(logs, "job_claim_refused")) == 1
    assert src.poll_blocking().errors == {}


def test_a_stepd_vouches_for_its_own_job_only(tmp_path: Path) -> None:
    """Without cgroup proctrack, a task of job 1000 below ``slurmstepd: [1000.0]`` that sets
    ``SLURM_JOB_ID=4242``: on main it was published in job 4242."""
    proc(tmp_path, 9, comm="slurmstepd", uid=0, cmdline=b"slurmstepd: [1000.0]\0")
    proc(tmp_path, 10, {"SLURM_JOB_ID": "4242"}, ppid=9, start=70)
    proc(tmp_path, 11, {"SLURM_JOB_ID": "1000"}, ppid=9, start=71)
    proc(tmp_path, 8, comm="slurmstepd", uid=0, cmdline=b"slurmstepd: [4242.batch]\0")
    proc(tmp_path, 12, {"SLURM_JOB_ID": "4242"}, ppid=8, start=72)
    src = source(tmp_path, [("0", 10), ("1", 11), ("2", 12)])
    with capture_logs() as logs:
        result = src.poll_blocking()
    assert jobs(result) == {
        "0": PROCESS.identity("n1/10-70"),
        "1": SLURM.identity("1000"),
        "2": SLURM.identity("4242"),
    }
    assert result.errors == {"job_claim_refused": 1}
    [line] = _refused(logs, "job_claim_refused")
    assert line["pid"] == 10 and "job 1000" in str(line["why"])


def test_a_stepd_whose_title_names_no_job_vouches_for_none(tmp_path: Path) -> None:
    proc(tmp_path, 9, comm="slurmstepd", uid=0, cmdline=b"/usr/sbin/slurmstepd\0")
    proc(tmp_path, 10, {"SLURM_JOB_ID": "4242"}, ppid=9, start=70)
    result = source(tmp_path, [("0", 10)]).poll_blocking()
    assert jobs(result) == {"0": PROCESS.identity("n1/10-70")}
    assert result.errors == {"job_claim_refused": 1}


def test_cgroup_v1_job_is_believed_only_for_its_own_uid(tmp_path: Path) -> None:
    proc(tmp_path, 10, uid=1000, cgroup="4:memory:/slurm/uid_1000/job_5/step_0/task_0\n")
    proc(tmp_path, 11, uid=1000, start=9, cgroup="4:memory:/slurm/uid_0/job_6/step_0\n")
    src = source(tmp_path, [("0", 10), ("1", 11)], environ=False)
    with capture_logs() as logs:
        result = src.poll_blocking()
    assert jobs(result) == {"0": SLURM.identity("5"), "1": PROCESS.identity("n1/11-9")}
    assert result.errors == {"slurm_cgroup_refused": 1}
    assert "uid_0" in str(_refused(logs, "slurm_cgroup_refused")[0]["why"])


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_job_directory_not_owned_by_root_is_refused(tmp_path: Path) -> None:
    """Where the cgroup file system is mounted here, the job directory's owner tells:
    slurmd (root) makes it; in a subtree delegated to a user, the user owns what they make."""
    mount = tmp_path / "cgroup"
    for job, owner in ((7, 0), (8, 1000)):
        d = mount / "system.slice" / "slurmstepd.scope" / f"job_{job}"
        d.mkdir(parents=True)
        os.chown(d, owner, owner)
    root = tmp_path / "proc"
    proc(root, 10, cgroup=slurm_cgroup(7))
    proc(root, 11, cgroup=slurm_cgroup(8), start=3)
    proc(root, 12, cgroup=slurm_cgroup(9), start=4)  # not visible here: cannot tell
    listed = (ProcessInfo("0", 10), ProcessInfo("1", 11), ProcessInfo("2", 12))
    src = ProcJobSource(JobsConfig(environ=False), str(root), NODE, processes=lambda: listed,
                        mounts={"": str(mount)})
    with capture_logs() as logs:
        result = src.poll_blocking()
    assert jobs(result) == {"0": SLURM.identity("7"), "1": PROCESS.identity("n1/11-3"),
                            "2": SLURM.identity("9")}
    assert result.errors == {"slurm_cgroup_refused": 1}
    assert "uid 1000" in str(_refused(logs, "slurm_cgroup_refused")[0]["why"])


def test_a_site_prefix_anchors_the_paths(tmp_path: Path) -> None:
    """slurmd in a container (or the exporter in a cgroup namespace): the site names the
    path its slurmd's tree hangs under; nothing else is believed."""
    proc(tmp_path, 10, cgroup="0::/site/slurmd/system.slice/slurmstepd.scope/job_7/step_0\n")
    proc(tmp_path, 11, cgroup=slurm_cgroup(8), start=3)
    src = source(tmp_path, [("0", 10), ("1", 11)], environ=False,
                 slurm_cgroup_prefix="/site/slurmd")
    result = src.poll_blocking()
    assert jobs(result) == {"0": SLURM.identity("7"), "1": PROCESS.identity("n1/11-3")}
    assert result.errors == {"slurm_cgroup_refused": 1}


def test_the_paths_slurmd_makes_are_believed() -> None:
    for text, job in [
        ("0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n", "42"),
        ("0::/system.slice/n7_slurmstepd.scope/job_42/step_extern\n", "42"),
        ("12:pids:/slurm/uid_5/job_42/step_0/task_1\n0::/\n", "42"),
        ("4:memory:/slurm_n7/uid_5/job_42/step_batch\n", "42"),
        ("0::/system.slice/slurmstepd.scope/system\n", None),  # the stepd's own
        ("0::/system.slice/cron.service/job_12\n", None),  # not slurm: nothing to refuse
    ]:
        cgroup = ident.parse_cgroup(text)
        assert cgroup.job == job and cgroup.refused is None, text
    two = "4:memory:/slurm/uid_5/job_1/step_0\n0::/system.slice/slurmstepd.scope/job_2/s\n"
    assert ident.parse_cgroup(two).refused is not None  # two jobs: believe neither


def test_the_settings_refuse_a_malformed_prefix() -> None:
    from pydantic import ValidationError

    for bad in ("site", "/site/", "/a b"):
        with pytest.raises(ValidationError):
            JobsConfig(slurm_cgroup_prefix=bad)
    assert JobsConfig(slurm_cgroup_prefix="/../..").slurm_cgroup_prefix == "/../.."


def test_from_a_pods_cgroup_namespace_the_root_is_found_through_init(tmp_path: Path) -> None:
    """The exporter in its own cgroup namespace (a pod on cgroup v2) sees the host's paths
    below ``..`` runs; PID 1's (``/../../../init.scope``) says how many lead to the root."""
    proc(tmp_path, 1, cgroup="0::/../../../init.scope\n", comm="systemd", uid=0)
    proc(tmp_path, 10, cgroup="0::/../../../system.slice/slurmstepd.scope/job_7/step_0\n")
    proc(tmp_path, 11, start=3,  # one level short of the root: a pod's sibling, not slurmd
         cgroup="0::/../../system.slice/slurmstepd.scope/job_8/step_0\n")
    result = source(tmp_path, [("0", 10), ("1", 11)], environ=False).poll_blocking()
    assert jobs(result) == {"0": SLURM.identity("7"), "1": PROCESS.identity("n1/11-3")}
    assert result.errors == {"slurm_cgroup_refused": 1}
