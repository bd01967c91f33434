"""What a collector declares: its name, default, settings section and flags, sources,
readings, families, and what the daemon may ask of it (a step after GPU polls, a live
reload). One module per collector (this package) holds one :class:`Collector`; the registry
(``exporter/collectors/__init__.py``) is the only list of them.

Imports nothing of the exporter at run time but the section base:
``exporter/wiring/config.py`` composes ``Settings`` from the registry, so the registry
must load before it, and a collector sees ``CoreSettings`` (its section by type).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from exporter.settings.section import Section

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.metrics.self_metrics import SelfMetrics
    from exporter.settings.core import CoreSettings
    from exporter.snapshot import SnapshotStore, SourceResult
    from exporter.sources.base import Source


class Shared(Protocol):
    """A resource the sources of several collectors share (a GPU library's session): the
    core knows it only by this shape, never by its library."""

    backend: str
    """What it runs on (``nvml``, ``simulated``...): the ``backend`` of build_info."""

    def close(self) -> None: ...


class Opens(Protocol):
    """A shared resource's class: opens one for the settings (and may raise, e.g.
    ``NvmlUnavailable``)."""

    @classmethod
    def open_for(cls, settings: CoreSettings) -> Shared: ...


R = TypeVar("R", bound=Shared)


class Resources:
    """The shared resources, by class: opened when a builder first asks for one, so a node
    whose sources need no GPU library starts without its driver; closed at shutdown."""

    def __init__(self, settings: CoreSettings, given: Sequence[Shared] = ()) -> None:
        self._settings = settings
        self._open: dict[type, Shared] = {type(r): r for r in given}
        """Already open (a test's session, the CLI's), found by their class."""

    def get(self, kind: type[R]) -> R:
        """The one ``kind`` this daemon shares, opened now if nobody asked yet."""
        found = self._open.get(kind)
        if found is None:
            found = self._open[kind] = cast("type[Opens]", kind).open_for(self._settings)
        return cast(R, found)

    @property
    def backend(self) -> str:
        """The first open resource's backend; ``none`` while none is open."""
        return next((r.backend for r in self._open.values()), "none")

    def close(self) -> None:
        for resource in self._open.values():
            resource.close()


@dataclass(frozen=True)
class Context:
    """What builders may use: the settings, the shared resources and the store (whose
    ``current`` they may only pass on as a view to the sources that declared a need)."""

    settings: CoreSettings
    shared: Resources
    """A builder asks for what its sources read (``ctx.shared.get(NvmlSession)``); only
    the collectors that ask open it."""
    store: SnapshotStore


@dataclass(frozen=True)
class Flag:
    """A command-line spelling of one settings key. Help, default, type and choices come
    from the key's field in the schema, so they cannot drift."""

    flag: str
    key: str
    """The key in the collector's section (in ``Settings`` for the CLI's own flags)."""
    metavar: str | None = None
    negate: bool = False
    """A ``--no-...`` flag that sets a default-on boolean to false."""


Reconfigure = Callable[["Sequence[Source]", Context], "list[Source]"]
"""Hand a reloaded section to a collector's running sources (``Context.settings`` is the new
one); returns the sources to add (e.g. the first target of a collector that had none)."""


AfterGpuPoll = Callable[
    [Context, "SelfMetrics", frozenset[str]], "Callable[[SourceResult], None]"
]
"""(context, the exporter's own metrics, names of the sources whose publish is a GPU poll)
-> a callback the scheduler runs after every publish; it acts only on those sources'."""


@dataclass(frozen=True)
class Collector:
    """One unit of ownership. Builders import the collector's code when called, so a
    disabled collector costs no memory (with Kubernetes off, no gRPC code is imported)."""

    name: str
    help: str
    default: Callable[[CoreSettings], bool]
    sources: Callable[[Context], list[Source]]
    families: Callable[[CoreSettings], tuple[Group, ...]]
    readings: tuple[type, ...] = ()
    """The reading types its sources publish (``SourceResult.reading``) and it alone owns,
    so ``Snapshot.get(kind)`` finds the one."""
    shares: tuple[type, ...] = ()
    """Reading types it publishes next to other collectors (each that publishes one says
    so here): ``JobAssignments`` from every job-identity source, which ``Snapshot.all``
    gathers and the model's step ranks once; ``ProfilingReading`` from every profiling
    backend, which ``Snapshot.profiling`` chooses from per GPU."""
    section: str = ""
    """The ``Settings`` field holding its options ("" when it has none of its own)."""
    config: type[Section] | None = None
    """That section's schema, declared next to the code that reads it; ``Settings`` gets a field
    ``section`` of this type (``exporter/wiring/config.py`` composes it from the registry)."""
    flags: tuple[Flag, ...] = ()
    """Command-line spellings of keys of its section; the CLI adds them in a group titled
    ``flag_group`` (help, default, type and environment variable from the field)."""
    flag_group: str = ""
    live: frozenset[str] = frozenset()
    """Keys of its section a reload hands to the running collector (``reconfigure``); a
    change to any other key waits for a restart."""
    reconfigure: Reconfigure | None = None
    after_gpu_poll: AfterGpuPoll | None = None
    """Builds what runs after each publish of a GPU poll (the model's step); which sources
    poll GPUs (``Source.gpu_poll``) and list them (``Source.starts_first``, what readiness
    waits for) their classes declare."""
    preference: tuple[str, ...] = ()
    """Its sources' names, most preferred first, where several answer for one GPU (the
    profiling backends): the snapshot's choice per GPU (``Snapshot.profiling``)."""
    series_labels: Callable[[CoreSettings], tuple[str, str, str] | None] | None = None
    """The (namespace, pod, container) label names it has copied onto every per-GPU series
    where its settings say so (the kubelet's pods), else None."""
    words: Callable[[CoreSettings], Mapping[str, str | int]] | None = None
    """What the start-up line and the reload line say of its settings (``kubernetes``:
    on, ``serving_targets``: 2), one word or number each."""


def always(_: CoreSettings) -> bool:
    return True


def no_sources(_: Context) -> list[Source]:
    return []


def no_families(_: CoreSettings) -> tuple[Group, ...]:
    return ()
