"""The collector registry, resolved: ``exporter/settings/names.py`` lists the collectors,
and each is declared in the module of this package named after it (name, default, settings
section and flags, sources, reading types, families). ``exporter/wiring/config.py``
composes ``Settings`` from :data:`REGISTRY`, so this package never imports it: collectors
type their settings as ``CoreSettings`` and read their own section with ``section()``.
``exporter/wiring/daemon.py`` wires only what :func:`enabled` returns; the CLI makes each
collector's flags and one ``--collector.<name>`` / ``--no-collector.<name>`` pair per
entry, the config file takes ``collectors: {<name>: true|false}``, and ``docs/metrics.md``
lists every family of every entry. Adding a collector means one new module here and one
name in ``exporter/settings/names.py`` (docs/architecture.md has the recipe).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context
from exporter.settings import names

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings

__all__ = ["NAMES", "REGISTRY", "Collector", "Context", "enabled", "families", "is_enabled",
           "preference", "series_labels", "words"]


def load(collector_names: Iterable[str]) -> tuple[Collector, ...]:
    """Each name's declaration, ``exporter.collectors.<name>.COLLECTOR``."""
    out = []
    for name in collector_names:
        collector = importlib.import_module(f"exporter.collectors.{name}").COLLECTOR
        if not isinstance(collector, Collector) or collector.name != name:
            raise TypeError(f"exporter.collectors.{name}.COLLECTOR must declare {name!r}")
        out.append(collector)
    return tuple(out)


REGISTRY: tuple[Collector, ...] = load(names.COLLECTOR_NAMES)
NAMES: tuple[str, ...] = tuple(c.name for c in REGISTRY)


def is_enabled(collector: Collector, settings: CoreSettings) -> bool:
    choice = settings.collectors.get(collector.name)
    return collector.default(settings) if choice is None else choice


def enabled(settings: CoreSettings) -> list[Collector]:
    return [c for c in REGISTRY if is_enabled(c, settings)]


def families(collectors: Iterable[Collector], settings: CoreSettings) -> list[Group]:
    """The family groups of ``collectors``, in registry order."""
    return [group for collector in collectors for group in collector.families(settings)]


def preference() -> tuple[str, ...]:
    """Every source name a collector ranks for the GPUs several of its sources answer for,
    most preferred first (the profiling backends)."""
    return tuple(name for c in REGISTRY for name in c.preference)


def series_labels(settings: CoreSettings) -> tuple[str, str, str] | None:
    """The pod label names to copy onto every per-GPU series, where a collector's settings
    ask for it (``Collector.series_labels``), else None."""
    for c in enabled(settings):
        labels = c.series_labels(settings) if c.series_labels is not None else None
        if labels is not None:
            return labels
    return None


def words(settings: CoreSettings) -> dict[str, str | int]:
    """What every collector says of its settings on the start-up and reload lines."""
    return {k: v for c in REGISTRY if c.words is not None for k, v in c.words(settings).items()}
