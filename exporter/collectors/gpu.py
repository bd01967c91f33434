"""The vendor-neutral GPU series of every GPU any GPU source lists: not a source, the
families its readings fill (``exporter/metrics/gpu.py``), and the profiling families any
profiling backend's readings fill (``exporter/metrics/profiling.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, always, no_sources

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings


def _families(_: CoreSettings) -> tuple[Group, ...]:
    from exporter.metrics.families import erase
    from exporter.metrics.gpu import IDENTITY, STATE
    from exporter.metrics.profiling import AVAILABILITY, FAMILIES

    return (erase(IDENTITY), erase(STATE), erase(AVAILABILITY), erase(FAMILIES))


COLLECTOR = Collector(
    "gpu",
    "identity, health, utilization, memory, power, energy, clocks, ECC and profiling "
    "counters of every GPU, whichever source reads them",
    always,
    no_sources,
    _families,
)
