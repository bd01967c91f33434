"""The job-identity section (``jobs:``), next to the sources that read it."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field

from exporter.settings.section import MAX_INTERVAL, Section
from exporter.sources.jobs.identity import environment


def _listed(names: Iterable[str]) -> str:
    """``a, b and c``."""
    *head, last = names
    return f"{', '.join(head)} and {last}" if head else last


class JobsConfig(Section):
    """Which job each GPU works for outside Kubernetes (Slurm, MPI, torchrun, dcgm-exporter's
    HPC job mapping, else the process session); see docs/jobs.md."""

    processes: bool = True
    """Name each GPU's job from its NVML compute processes' /proc/<pid>/cgroup, stat and a
    few environ variables (needs the host's PID namespace)."""
    environ: bool = Field(True, description=(
        f"Read {_listed(environment())} from /proc/<pid>/environ (the variables the job "
        "sources declare; needs the job's uid or CAP_SYS_PTRACE; without them, jobs come "
        "from Slurm cgroup paths and process sessions)."))
    proc_root: str = ""
    """Where the host's /proc is mounted; empty: kubernetes.proc_root (--proc-root), and
    under --simulate without --proc-root a generated tree of the simulated processes."""
    interval: float = Field(1.0, gt=0, le=MAX_INTERVAL)
    """Seconds between job-identity reads (each process is read once and cached; a reused
    pid is told by its new /proc inode, without a read). A job's GPU time is split from the
    poll that first names it, so this is also how much of a new job's start can go
    uncounted (4 s of a late joiner's waiting, on H200, at the former 5 s)."""
    slurm_cgroup_prefix: str = Field("", pattern=r"^(/[A-Za-z0-9._@:+=-]+)*$")
    """The cgroup path this site's slurmd runs under, when not at the root: Slurm jobs are
    believed only at ``<prefix>/system.slice/slurmstepd.scope/job_<id>`` (cgroup v2) or
    ``<prefix>/slurm/uid_<uid>/job_<id>`` (v1); e.g. ``/../..`` when the exporter runs in
    a cgroup namespace two levels below the root (docs/jobs.md)."""
    hpc_job_mapping_dir: str = ""
    """dcgm-exporter's HPC job-mapping directory (its --hpc-job-mapping-dir): one file per
    GPU index, one job id per line."""
