"""Wires the daemon from settings: the enabled collectors' sources, the snapshot store, the
model step, the exposition and the HTTP app. It decides nothing itself: what runs comes from
the collector registry (``exporter/collectors/``).

Kept apart from the CLI so tests can build a daemon in-process around any NVML module
(``session``: a shared resource already open). It names no backend: the collectors ask
``Context.shared`` for what their sources read.
"""

from __future__ import annotations

import asyncio
import platform
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from exporter import __version__, collectors
from exporter.collectors.base import Resources, Shared
from exporter.metrics.cache import ExpositionCache
from exporter.metrics.encode import Encoder
from exporter.metrics.self_metrics import SelfMetrics
from exporter.process.interpreter import FREEZE_AFTER_S, freeze_startup_heap
from exporter.runtime.scheduler import AfterPublish, Scheduler
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.base import Source
from exporter.view.page import pages
from exporter.web.server import build_app
from exporter.wiring.config import Settings


@dataclass
class Daemon:
    settings: Settings
    shared: Resources
    store: SnapshotStore
    registry: CollectorRegistry
    scheduler: Scheduler
    exposition: ExpositionCache
    sources: list[Source] = field(default_factory=list)
    owned: dict[str, list[Source]] = field(default_factory=dict)
    """Each enabled collector's sources, by collector name (a reload hands them their
    section)."""
    reload: Callable[[], bool] | None = None
    """Re-reads the configuration (set by the CLI, run on SIGHUP)."""
    _reloads: set[asyncio.Future[bool]] = field(default_factory=set)

    def app(self, middlewares: list[Any] | None = None) -> web.Application:
        app = build_app(
            self.store,
            self.exposition,
            self.shared.backend,
            middlewares,
            debug_state=self.settings.debug_state,
            pages=pages(self.exposition, self.settings.debug_state),
        )

        async def start(_: web.Application) -> None:
            loop = asyncio.get_running_loop()
            if self.reload is not None:
                loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
            self.exposition.start()
            await self.scheduler.start()
            loop.call_later(FREEZE_AFTER_S, freeze_startup_heap)

        async def stop(_: web.Application) -> None:
            await self.scheduler.stop()
            self.exposition.stop()
            self.shared.close()

        app.on_startup.append(start)
        app.on_cleanup.append(stop)
        return app


    def _on_sighup(self) -> None:
        """Start a reload; its parsing runs on a worker thread, never on the event loop."""
        run = getattr(self.reload, "run", None)
        if run is None:
            if self.reload is not None:
                self.reload()
            return
        task = asyncio.ensure_future(run())
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    def apply(self, settings: Settings) -> None:
        """Apply a reloaded configuration: each collector that can take its section live
        (``Collector.reconfigure``) gets it at its next poll; what else changed waits for a
        restart (``reload.needs_restart`` says which)."""
        live = [c for c in collectors.REGISTRY if c.reconfigure is not None and c.section]
        self.settings = self.settings.model_copy(
            update={c.section: getattr(settings, c.section) for c in live}
        )
        ctx = collectors.Context(self.settings, self.shared, self.store)
        for c in live:
            if c.reconfigure is None or not collectors.is_enabled(c, self.settings):
                continue
            running = self.owned.setdefault(c.name, [])
            for added in c.reconfigure(tuple(running), ctx):
                self.scheduler.add(added)
                running.append(added)
                self.sources.append(added)


def _chain(steps: list[AfterPublish]) -> AfterPublish | None:
    """One after-publish callback running ``steps`` in order (None when there are none)."""
    if len(steps) <= 1:
        return steps[0] if steps else None

    def run(result: SourceResult) -> None:
        for step in steps:
            step(result)

    return run


def build(settings: Settings, session: Shared | None = None) -> Daemon:
    """The daemon for ``settings``; NVML (``session``, else opened when a collector first
    needs it) may raise ``NvmlUnavailable`` here."""
    node = settings.node_name
    shared = Resources(settings, [] if session is None else [session])
    chosen = collectors.enabled(settings)
    store = SnapshotStore(node, profiling_order=collectors.preference())
    ctx = collectors.Context(settings, shared, store)
    owned = {c.name: c.sources(ctx) for c in chosen}
    sources = [source for c in chosen for source in owned[c.name]]
    # Ready once a GPU-listing source has listed GPUs; with none enabled, at once.
    store.wait_for(s.name for s in sources if s.starts_first)
    registry = CollectorRegistry(auto_describe=False)
    metrics = SelfMetrics(registry, node)
    metrics.build_info.labels(node, __version__, shared.backend, platform.python_version()).set(1)
    ProcessCollector(registry=registry)
    encoder = Encoder(
        collectors.families(chosen, settings),
        registry,
        include_optional=settings.extended_metrics,
        pod_labels=collectors.series_labels(settings),
    )
    exposition = ExpositionCache(encoder, lambda: store.current)
    store.subscribe(exposition.published)
    triggers = frozenset(s.name for s in sources if s.gpu_poll)
    steps = [c.after_gpu_poll(ctx, metrics, triggers) for c in chosen if c.after_gpu_poll]
    scheduler = Scheduler(sources, store, metrics, after_publish=_chain(steps))
    return Daemon(settings, shared, store, registry, scheduler, exposition, sources, owned)
