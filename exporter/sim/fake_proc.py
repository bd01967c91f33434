"""A /proc tree for the simulated node's GPU processes, so the job-identity source runs the
code it runs on a real node with only its root moved.

Each process of :data:`exporter.sim.patterns.NODE` gets ``<pid>/stat`` (its own session,
a fixed start time), ``<pid>/cgroup`` (a user slice; a Slurm step's cgroup when its workload
has a Slurm job) and ``<pid>/environ`` (a few ordinary variables, a secret that must never be
published, and the workload's ``job`` variables).
"""

from __future__ import annotations

import os
import tempfile

from exporter.sim.patterns import NODE, Workload

START_TICKS = 1_000_000
"""Start time of the first simulated process, in clock ticks after boot."""
SECRET = ("WANDB_API_KEY", "simulated-secret-never-published")


def _files(pid: int, workload: Workload, start: int) -> dict[str, bytes]:
    job = dict(workload.job)
    slurm = job.get("SLURM_JOB_ID")
    cgroup = (
        f"0::/system.slice/slurmstepd.scope/job_{slurm}/step_0/user/task_0\n"
        if slurm
        else f"0::/user.slice/user-1000.slice/session-{pid}.scope\n"
    )
    env = [("PATH", "/usr/local/bin:/usr/bin:/bin"), ("HOME", "/home/sim"), SECRET, *job.items()]
    stat = f"{pid} (python3 train) S 1 {pid} {pid} 0 -1 4194560" + " 0" * 12 + f" {start} 0 0\n"
    return {
        "stat": stat.encode(),
        "cgroup": cgroup.encode(),
        "environ": b"".join(f"{k}={v}\0".encode() for k, v in env),
    }


def write_proc(root: str, workloads: tuple[Workload, ...] = NODE) -> None:
    """Write the tree of ``workloads``' processes under ``root``."""
    for index, workload in enumerate(workloads):
        for pid, _ in workload.processes:
            directory = os.path.join(root, str(pid))
            os.makedirs(directory, exist_ok=True)
            for name, data in _files(pid, workload, START_TICKS + index).items():
                with open(os.path.join(directory, name), "wb") as f:
                    f.write(data)


def simulated_proc() -> tempfile.TemporaryDirectory[str]:
    """A temporary directory holding the simulated node's /proc; removed when the returned
    object is closed or collected."""
    tree = tempfile.TemporaryDirectory(prefix="goodput-sim-proc-")
    write_proc(tree.name)
    return tree
