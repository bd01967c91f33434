"""The vendor-neutral GPU series of every GPU any GPU source lists: not a source, the
families its readings fill (``exporter/metrics/gpu.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, always, no_sources

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings


def _families(_: CoreSettings) -> tuple[Group, ...]:
    from exporter.metrics.families import erase
    from exporter.metrics.gpu import IDENTITY, STATE

    return (erase(IDENTITY), erase(STATE))


COLLECTOR = Collector(
    "gpu",
    "identity, health, utilization, memory, power, energy, clocks, ECC of every GPU, "
    "whichever source lists it",
    always,
    no_sources,
    _families,
)
