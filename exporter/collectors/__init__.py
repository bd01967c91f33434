"""The collector registry: the only list of collectors.

Each collector is declared in its own module of this package (name, default, settings
section, sources, reading types, families); ``daemon.py`` wires only what :func:`enabled`
returns; the CLI makes one ``--collector.<name>`` / ``--no-collector.<name>`` pair per entry,
the config file takes ``collectors: {<name>: true|false}``, and ``docs/metrics.md`` lists
every family of every entry. Adding a collector means one new module and one line here
(docs/architecture.md has the recipe).
"""

from __future__ import annotations

from collections.abc import Iterable

from exporter.collectors import cgroup, kubelet, model, nvml, profiling, serving, xid
from exporter.collectors.base import Collector, Context
from exporter.config import Settings
from exporter.metrics.families import Group

__all__ = ["NAMES", "REGISTRY", "Collector", "Context", "enabled", "families", "is_enabled"]

REGISTRY: tuple[Collector, ...] = (
    nvml.COLLECTOR,
    xid.COLLECTOR,
    profiling.COLLECTOR,
    kubelet.COLLECTOR,
    cgroup.COLLECTOR,
    serving.COLLECTOR,
    model.COLLECTOR,
)
NAMES: tuple[str, ...] = tuple(c.name for c in REGISTRY)


def is_enabled(collector: Collector, settings: Settings) -> bool:
    choice = settings.collectors.get(collector.name)
    return collector.default(settings) if choice is None else choice


def enabled(settings: Settings) -> list[Collector]:
    return [c for c in REGISTRY if is_enabled(c, settings)]


def families(collectors: Iterable[Collector], settings: Settings) -> list[Group]:
    """The family groups of ``collectors``, in registry order."""
    return [group for collector in collectors for group in collector.families(settings)]
