"""Profiling counters from GPM, DCGM or dcgm-exporter (``exporter/sources/profiling/``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context, Flag, always, no_families
from exporter.readings import ProfilingReading
from exporter.sources.profiling.config import ProfilingConfig
from exporter.sources.profiling.modes import BACKENDS

if TYPE_CHECKING:
    from exporter.sources.base import Source


def _sources(ctx: Context) -> list[Source]:
    from exporter.sources.nvml_session import NvmlSession
    from exporter.sources.profiling.build import build_profiling_sources

    store = ctx.store
    return build_profiling_sources(
        ctx.settings, ctx.shared.get(NvmlSession), inventory=lambda: store.current.inventory
    )


COLLECTOR = Collector(
    "profiling",
    "SM active, occupancy, tensor, DRAM, pipes, PCIe/NVLink (GPM, DCGM or dcgm-exporter; "
    "see --profiling; with --profiling off it says so on every GPU)",
    always,
    _sources,
    no_families,  # the gpu collector's, whichever backend reads them
    shares=(ProfilingReading,),
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
