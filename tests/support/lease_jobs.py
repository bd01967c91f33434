"""A job-identity source, whole in one module: what adding one takes (issue #32).

A made-up scheduler writes a "lease" per GPU; this collector declares its section (with a
flag), a source that publishes :class:`~exporter.readings.JobAssignments` with its own
``job_source``, and the collector entry. Nothing else in the exporter changes: the snapshot
merges its identities with every other source's, the model judges the GPUs it names as one
job (straggler, waited seconds), the encoder puts them on ``goodput_gpu_job_info`` and the
job series; its identities outrank the process session's by the strength it declares
(:data:`LEASE`), no list edited. ``tests/support/scratch.py`` adds it as a contributor
would (this file as ``exporter/collectors/lease.py``, its name in
``exporter/settings/names.py``), and ``tests/test_job_source.py`` runs and checks that copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from exporter.collectors.base import Collector, Context, Flag, always
from exporter.readings import JobAssignments, JobSource
from exporter.settings.section import Section
from exporter.snapshot import SourceResult
from exporter.sources.base import Source

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings

NAME = "lease"
LEASE = JobSource(NAME, 55, spans_nodes=False)
"""A scheduler's own word: above Slurm's (50) and every launcher's and process session's,
below the kubelet's pods (60)."""


class LeaseConfig(Section):
    """The test scheduler's leases (its section lives here, with its collector)."""

    gpus: list[str] = Field(default_factory=lambda: ["9", "10"])
    """GPUs leased to the one job, lease-7."""


class LeaseSource(Source):
    name = NAME
    interval = 1.0

    def __init__(self, gpus: list[str]) -> None:
        self.gpus = tuple(gpus)

    async def poll(self) -> SourceResult:
        job = LEASE.identity("lease-7")
        leases = JobAssignments(NAME, dict.fromkeys(self.gpus, job))
        return SourceResult(source=NAME, reading=leases)


def _sources(ctx: Context) -> list[Source]:
    return [LeaseSource(ctx.settings.section(LeaseConfig).gpus)]


def _families(_: CoreSettings) -> tuple[Group, ...]:
    return ()


COLLECTOR = Collector(
    NAME,
    "a test-only job-identity source (a made-up scheduler's GPU leases)",
    always,
    _sources,
    _families,
    shares=(JobAssignments,),
    section=NAME,
    config=LeaseConfig,
    flags=(Flag("--lease-gpu", "gpus", "GPU"),),
    flag_group="test leases",
)
