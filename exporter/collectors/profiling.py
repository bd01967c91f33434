"""Profiling counters from GPM, DCGM or dcgm-exporter (``exporter/sources/profiling/``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context, Flag, always
from exporter.readings import ProfilingReading
from exporter.sources.profiling.config import ProfilingConfig
from exporter.sources.profiling.modes import BACKENDS

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings
    from exporter.sources.base import Source


def _sources(ctx: Context) -> list[Source]:
    from exporter.sources.nvml_session import NvmlSession
    from exporter.sources.profiling.build import build_profiling_sources

    store = ctx.store
    return build_profiling_sources(
        ctx.settings, ctx.shared.get(NvmlSession), inventory=lambda: store.current.inventory
    )


def _families(_: CoreSettings) -> tuple[Group, ...]:
    from exporter.metrics.families import erase
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
    flags=(
        Flag("--profiling", "mode"),
        Flag("--dcgm-host-engine", "dcgm_host_engine", "ADDR"),
        Flag("--dcgm-exporter-url", "dcgm_exporter_url", "URL"),
        Flag("--dcgm-bindings-path", "dcgm_bindings_path", "DIR"),
    ),
    flag_group="profiling counters (docs/profiling.md)",
    preference=BACKENDS,
)
