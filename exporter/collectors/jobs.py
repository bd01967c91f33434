"""Job identity: which job each GPU works for, outside Kubernetes too (Slurm, torchrun, MPI,
dcgm-exporter's HPC job mapping, else the process tree). Publishes
:class:`~exporter.readings.JobAssignments`; the model's step resolves them once with the
kubelet's pods, and the model, the encoder and the mixin read only that answer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context, Flag, always
from exporter.readings import JobAssignments
from exporter.sources.jobs.config import JobsConfig
from exporter.sources.kubernetes.config import KubernetesConfig

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings
    from exporter.sources.base import Source


def _sources(ctx: Context) -> list[Source]:
    jobs = ctx.settings.section(JobsConfig)
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


def _proc_root(settings: CoreSettings) -> tuple[str, object]:
    """The /proc to read, and what must live as long as the source: on the simulated node
    without an explicit root (``jobs.proc_root``, or ``--proc-root`` given), a generated
    tree for its processes (the same code path)."""
    jobs, k8s = settings.section(JobsConfig), settings.section(KubernetesConfig)
    if jobs.proc_root:
        return jobs.proc_root, None
    if settings.simulate and "proc_root" not in k8s.model_fields_set:
        from exporter.sim.fake_proc import simulated_proc

        tree = simulated_proc()
        return tree.name, tree
    return k8s.proc_root, None


def _families(_: CoreSettings) -> tuple[Group, ...]:
    """None of its own: ``goodput_gpu_job_info`` is the model's (every source's jobs)."""
    return ()


COLLECTOR = Collector(
    "jobs",
    "which job each GPU works for: Kubernetes pods, Slurm, torchrun, MPI, HPC job mapping, "
    "process tree",
    always,
    _sources,
    _families,
    shares=(JobAssignments,),
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
