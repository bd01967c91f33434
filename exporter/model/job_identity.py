"""Which job each GPU works for, resolved once per model step from every identity source.

The sources say what they saw: the kubelet's pods (a job label, else the pod) and each
published :class:`~exporter.readings.JobAssignments` (the process source ranks what one
GPU's processes claim, the HPC job map, any added source). :func:`resolve` ranks them once,
in the model's step, by the strength each source declared (:func:`~exporter.readings.strongest`);
the step judges its jobs from that answer and publishes it with its verdicts
(``NodeVerdicts.gpu_jobs``), so ``goodput_gpu_job_info`` and every job verdict come from the
same snapshot and no reader merges identities again.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from exporter.readings import KUBERNETES_JOBS, JobAssignments, JobIdentity, strongest

if TYPE_CHECKING:
    from collections.abc import Mapping

    from exporter.readings import PodAssignments
    from exporter.snapshot import Snapshot


def resolve(snap: Snapshot) -> Mapping[str, JobIdentity]:
    """gpu -> the job it works for: per GPU the strongest identity any source published
    (one reading may carry several kinds, as the process source's Slurm and session jobs
    do), ties broken by key, so the answer never depends on publish order. GPUs of no known
    job are absent."""
    named: dict[str, list[JobIdentity]] = {}
    for claim in (*_pod_jobs(snap.pods_known), *snap.all(JobAssignments)):
        for gpu, identity in claim.gpus.items():
            named.setdefault(gpu, []).append(identity)
    found = {gpu: strongest(identities) for gpu, identities in named.items()}
    return MappingProxyType({gpu: j for gpu, j in sorted(found.items()) if j is not None})


def _pod_jobs(pods: PodAssignments | None) -> tuple[JobAssignments, ...]:
    """The kubelet's assignments as job identities: pods sharing a job label are one job,
    a pod without one is its own (a GPU held by several pods takes the first, sorted)."""
    if pods is None:
        return ()
    gpus: dict[str, JobIdentity] = {}
    for (namespace, job), held in sorted(pods.job_gpus().items()):
        for gpu in held:
            gpus.setdefault(gpu, KUBERNETES_JOBS.identity(job, namespace))
    return (JobAssignments(KUBERNETES_JOBS.name, gpus),)
