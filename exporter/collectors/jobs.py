"""Job identity: which job each GPU works for, outside Kubernetes too (Slurm, torchrun, MPI,
dcgm-exporter's HPC job mapping, else the process tree). Publishes
:class:`~exporter.readings.JobAssignments`; ``Snapshot.jobs`` merges them with the kubelet's
pods, and the model, the encoder and the mixin read only that merged view."""

from __future__ import annotations

from collections.abc import Iterable

from exporter.collectors.base import Collector, Context, always
from exporter.config import JobsConfig, Settings
from exporter.metrics.families import Family, GpuFamilies, Group, Row, erase
from exporter.model.families import JOB_LABELS
from exporter.readings import JobAssignments, JobIdentity
from exporter.sources.base import Source


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
    without an explicit root, a generated tree for its processes (the same code path)."""
    if settings.jobs.proc_root:
        return settings.jobs.proc_root, None
    if settings.simulate:
        from exporter.sim.fake_proc import simulated_proc

        tree = simulated_proc()
        return tree.name, tree
    return settings.kubernetes.proc_root, None


def _info(identity: JobIdentity) -> Iterable[Row]:
    return ((identity.key, 1.0),)


JOB_INFO = GpuFamilies[JobIdentity](
    "jobs",
    lambda snap: snap.jobs,
    (
        Family(
            "goodput_gpu_job_info",
            "gauge",
            "Constant 1 per GPU and the job it works for: job_source is where the identity "
            "came from (kubernetes, slurm, hpc, mpi, torchrun, process), (job_source, "
            "namespace, job_id) the job key every job series and rule uses; namespace is "
            "set for Kubernetes only. Join on node and gpu.",
            _info,
            labels=JOB_LABELS,
        ),
    ),
)


def _families(settings: Settings) -> tuple[Group, ...]:
    return (erase(JOB_INFO),)


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
)
