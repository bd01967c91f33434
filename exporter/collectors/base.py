"""What a collector declares: its name, default, settings section, sources, readings and
families. One module per collector (this package) holds one :class:`Collector`; the
registry (``exporter/collectors/__init__.py``) is the only list of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporter.config import Section, Settings
from exporter.metrics.families import Group
from exporter.snapshot import SnapshotStore
from exporter.sources.base import Source
from exporter.sources.nvml_session import NvmlSession


@dataclass(frozen=True)
class Context:
    """What builders may use: the settings, the shared NVML session and the store (whose
    ``current`` they may only pass on as a view to the sources that declared a need)."""

    settings: Settings
    session: NvmlSession
    store: SnapshotStore


@dataclass(frozen=True)
class Collector:
    """One unit of ownership. Builders import the collector's code when called, so a
    disabled collector costs no memory (with Kubernetes off, no gRPC code is imported)."""

    name: str
    help: str
    default: Callable[[Settings], bool]
    sources: Callable[[Context], list[Source]]
    families: Callable[[Settings], tuple[Group, ...]]
    readings: tuple[type, ...] = ()
    """The reading types its sources publish (``SourceResult.reading``); each type has one
    owner, so ``Snapshot.get(kind)`` finds it."""
    section: str = ""
    """The ``Settings`` field holding its options ("" when it has none of its own)."""
    config: type[Section] | None = None
    """That section's schema (``exporter/config.py``), from which its flags are made."""


def always(_: Settings) -> bool:
    return True


def no_sources(_: Context) -> list[Source]:
    return []
