"""Job identity: which job each GPU works for, outside Kubernetes too (Slurm, torchrun, MPI,
dcgm-exporter's HPC job mapping, else the process tree). Publishes
:class:`~exporter.readings.JobAssignments`; ``Snapshot.jobs`` merges them with the kubelet's
pods, and the model, the encoder and the mixin read only that merged view."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from exporter.collectors.base import Collector, Context, Flag, always
from exporter.readings import JobAssignments
from exporter.settings.section import MAX_INTERVAL, Section

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.config import Settings
    from exporter.sources.base import Source


class JobsConfig(Section):
    """Which job each GPU works for outside Kubernetes (Slurm, MPI, torchrun, dcgm-exporter's
    HPC job mapping, else the process session); see docs/jobs.md."""

    processes: bool = True
    """Name each GPU's job from its NVML compute processes' /proc/<pid>/cgroup, stat and a
    few environ variables (needs the host's PID namespace)."""
    environ: bool = True
    """Read SLURM_JOB_ID, PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid and TORCHELASTIC_RUN_ID
    from /proc/<pid>/environ (needs the job's uid or CAP_SYS_PTRACE; without them, jobs
    come from Slurm cgroup paths and process sessions)."""
    proc_root: str = ""
    """Where the host's /proc is mounted; empty: kubernetes.proc_root (--proc-root), and
    under --simulate without --proc-root a generated tree of the simulated processes."""
    interval: float = Field(5.0, gt=0, le=MAX_INTERVAL)
    """Seconds between job-identity reads (each process is read once and cached; only its
    start time is read again, to tell a reused pid)."""
    hpc_job_mapping_dir: str = ""
    """dcgm-exporter's HPC job-mapping directory (its --hpc-job-mapping-dir): one file per
    GPU index, one job id per line."""


def _sources(ctx: Context) -> list[Source]:
    jobs = ctx.settings.jobs
    store = ctx.store
    sources: list[Source] = []
    if jobs.processes:
        from exporter.sources.jobs.procfs import ProcJobSource

        root, keep = _proc_root(ctx.settings)
        sources.append(
            ProcJobSource(
                jobs, root, ctx.settings.node_name,
                processes=lambda: store.current.processes, keep=keep,
            )
        )
    if jobs.hpc_job_mapping_dir:
        from exporter.sources.jobs.hpc import HpcJobMapSource

        sources.append(
            HpcJobMapSource(
                jobs.hpc_job_mapping_dir, jobs.interval, lambda: store.current.inventory
            )
        )
    return sources


def _proc_root(settings: Settings) -> tuple[str, object]:
    """The /proc to read, and what must live as long as the source: on the simulated node
    without an explicit root (``jobs.proc_root``, or ``--proc-root`` given), a generated
    tree for its processes (the same code path)."""
    if settings.jobs.proc_root:
        return settings.jobs.proc_root, None
    if settings.simulate and "proc_root" not in settings.kubernetes.model_fields_set:
        from exporter.sim.fake_proc import simulated_proc

        tree = simulated_proc()
        return tree.name, tree
    return settings.kubernetes.proc_root, None


def _families(_: Settings) -> tuple[Group, ...]:
    """None of its own: ``goodput_gpu_job_info`` is the model's (every source's jobs)."""
    return ()


COLLECTOR = Collector(
    "jobs",
    "which job each GPU works for: Kubernetes pods, Slurm, torchrun, MPI, HPC job mapping, "
    "process tree",
    always,
    _sources,
    _families,
    readings=(JobAssignments,),
    section="jobs",
    config=JobsConfig,
    flags=(
        Flag("--no-job-processes", "processes", negate=True),
        Flag("--no-job-environ", "environ", negate=True),
        Flag("--jobs-interval", "interval", "SECONDS"),
        Flag("--hpc-job-mapping-dir", "hpc_job_mapping_dir", "DIR"),
    ),
    flag_group="job identity outside Kubernetes (docs/jobs.md)",
)
