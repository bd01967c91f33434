"""NVML: identity, health, utilization, memory, power, energy, clocks and ECC per GPU."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context, always
from exporter.readings import NvmlReading

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings
    from exporter.sources.base import Source


def _sources(ctx: Context) -> list[Source]:
    from exporter.sources.nvml import NvmlSource
    from exporter.sources.nvml_session import NvmlSession

    return [NvmlSource(ctx.shared.get(NvmlSession), interval=ctx.settings.interval)]


def _families(_: CoreSettings) -> tuple[Group, ...]:
    from exporter.metrics.families import erase
    from exporter.sources.nvml import FAMILIES, IDENTITY

    return (erase(IDENTITY), erase(FAMILIES))


COLLECTOR = Collector(
    "nvml",
    "identity, health, utilization, memory, power, energy, clocks, ECC of every GPU",
    always,
    _sources,
    _families,
    readings=(NvmlReading,),
)
