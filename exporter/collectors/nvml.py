"""NVML: identity, health, utilization, memory, power, energy, clocks and ECC per GPU, read
into the typed ``NvmlReading``; the ``gpu`` collector publishes its series, as it does any
GPU source's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context, always, no_families
from exporter.readings import NvmlReading

if TYPE_CHECKING:
    from exporter.sources.base import Source


def _sources(ctx: Context) -> list[Source]:
    from exporter.sources.nvml import NvmlSource
    from exporter.sources.nvml_session import NvmlSession

    return [NvmlSource(ctx.shared.get(NvmlSession), interval=ctx.settings.interval)]


COLLECTOR = Collector(
    "nvml",
    "identity, health, utilization, memory, power, energy, clocks, ECC of every GPU",
    always,
    _sources,
    no_families,
    readings=(NvmlReading,),
)
