"""A toy collector, whole in one module: what adding a source takes.

It declares a reading, a source that publishes it, a family over it and the collector entry.
Nothing else changes: no field on ``SourceResult``, no view on the snapshot, no flag by
hand. ``tests/test_registry.py`` adds :data:`COLLECTOR` to the registry (the one line) and
scrapes it from a real daemon.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.collectors.base import Collector, Context, always
from exporter.metrics.families import Group, NodeFamilies, erase, gauge
from exporter.settings.core import CoreSettings
from exporter.snapshot import SourceResult
from exporter.sources.base import Source


@dataclass(frozen=True, slots=True)
class ToyReading:
    """The toy's one typed reading."""

    answer: float


class ToySource(Source):
    name = "toy"

    async def poll(self) -> SourceResult:
        return SourceResult(source=self.name, reading=ToyReading(42.0))


FAMILIES = NodeFamilies[ToyReading](
    "toy",
    lambda snap: snap.get(ToyReading),
    (gauge("goodput_toy_answer", "The toy source's answer.", lambda r: r.answer),),
)


def _sources(_: Context) -> list[Source]:
    return [ToySource()]


def _families(_: CoreSettings) -> tuple[Group, ...]:
    return (erase(FAMILIES),)


COLLECTOR = Collector(
    "toy", "a toy source", always, _sources, _families, readings=(ToyReading,)
)
