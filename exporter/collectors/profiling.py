"""Profiling counters from GPM, DCGM or dcgm-exporter (``exporter/sources/profiling/``)."""

from __future__ import annotations

from exporter.collectors.base import Collector, Context, always
from exporter.config import ProfilingConfig, Settings
from exporter.metrics.families import Group, erase
from exporter.readings import ProfilingReading
from exporter.sources.base import Source


def _sources(ctx: Context) -> list[Source]:
    from exporter.sources.profiling.build import build_profiling_sources

    store = ctx.store
    return build_profiling_sources(
        ctx.settings, ctx.session, inventory=lambda: store.current.inventory
    )


def _families(_: Settings) -> tuple[Group, ...]:
    from exporter.sources.profiling.families import AVAILABILITY, FAMILIES

    return (erase(AVAILABILITY), erase(FAMILIES))


COLLECTOR = Collector(
    "profiling",
    "SM active, occupancy, tensor, DRAM, pipes, PCIe/NVLink (GPM, DCGM or dcgm-exporter; "
    "see --profiling; with --profiling off it says so on every GPU)",
    always,
    _sources,
    _families,
    readings=(ProfilingReading,),
    section="profiling",
    config=ProfilingConfig,
)
