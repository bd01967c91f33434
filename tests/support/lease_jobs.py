"""A job-identity source, whole in one module: what adding one takes (issue #32).

A made-up scheduler writes a "lease" per GPU; this collector declares its section (with a
flag), a source that publishes :class:`~exporter.readings.JobAssignments` with its own
``job_source``, and the collector entry. Nothing else in the exporter changes: the snapshot
merges its identities with every other source's, the model judges the GPUs it names as one
job (straggler, waited seconds), the encoder puts them on ``goodput_gpu_job_info`` and the
job series. The one registry line is ``tests.support.second_vendor.register`` (what one
more name in ``exporter/settings/names.py`` does).

``python -m tests.support.lease_jobs ARGS`` runs the real daemon with it registered:
``tests/test_job_source.py`` starts it on the simulated node.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from pydantic import Field

from exporter.collectors.base import Collector, Context, Flag, always
from exporter.readings import JobAssignments, JobSource
from exporter.settings.section import Section
from exporter.snapshot import SourceResult
from exporter.sources.base import Source

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.config import Settings

NAME = "lease"
LEASE = JobSource(NAME, 15)
"""Its word counts above a process session's (10), below any launcher's (torchrun 20)."""


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


def _families(_: Settings) -> tuple[Group, ...]:
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


if __name__ == "__main__":
    from tests.support.second_vendor import run_daemon

    sys.exit(run_daemon(sys.modules[__name__], NAME))
