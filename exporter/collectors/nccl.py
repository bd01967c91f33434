"""NCCL collectives launched per GPU, from NCCL's RAS endpoints (docs/jobs.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context, Flag, always
from exporter.readings import CollectiveReading
from exporter.sources.nccl.config import NcclConfig

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings
    from exporter.sources.base import Source


def _sources(ctx: Context) -> list[Source]:
    from exporter.sources.nccl.source import NcclSource, pod_addresses

    store = ctx.store
    cfg = ctx.settings.section(NcclConfig)
    return [NcclSource(cfg, lambda: store.current.processes,
                       pods=lambda: pod_addresses(store.current, cfg.pod_port))]


def _families(_: CoreSettings) -> tuple[Group, ...]:
    from exporter.metrics.families import erase
    from exporter.sources.nccl.families import GPU_FAMILIES, NODE_FAMILIES

    return (erase(GPU_FAMILIES), erase(NODE_FAMILIES))


COLLECTOR = Collector(
    "nccl",
    "NCCL collectives launched per GPU, from NCCL's RAS endpoints",
    always,
    _sources,
    _families,
    readings=(CollectiveReading,),
    section="nccl",
    config=NcclConfig,
    flags=(
        Flag("--nccl-ras-address", "addresses", "HOST:PORT"),
        Flag("--nccl-interval", "interval", "SECONDS"),
        Flag("--nccl-timeout", "timeout", "SECONDS"),
    ),
    flag_group="NCCL collectives (docs/jobs.md)",
)
