"""Wires the daemon from settings: the enabled collectors' sources, the snapshot store, the
model step, the exposition and the HTTP app. It decides nothing itself: what runs comes from
the collector registry (``exporter/collectors.py``).

Kept apart from the CLI so tests can build a daemon in-process around any NVML module.
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
from exporter.config import Settings
from exporter.interpreter import FREEZE_AFTER_S, freeze_startup_heap
from exporter.metrics.cache import ExpositionCache
from exporter.metrics.encode import Encoder
from exporter.metrics.self_metrics import SelfMetrics
from exporter.scheduler import ModelStep, Scheduler
from exporter.server import build_app
from exporter.snapshot import SnapshotStore
from exporter.sources.base import Source
from exporter.sources.nvml_session import NvmlSession


def open_nvml(settings: Settings) -> NvmlSession:
    """Open the NVML session the sources share; raises ``NvmlUnavailable``.

    With ``simulate`` the session runs on the built-in simulated node, a pynvml drop-in, so
    every source runs the same code it runs on a GPU node.
    """
    nvml: Any
    if settings.simulate:
        from exporter.sim.fake_nvml import simulated_node

        nvml, backend = simulated_node(gpus=settings.simulate_gpus), "simulated"
    else:
        import pynvml

        nvml, backend = pynvml, "nvml"
    session = NvmlSession(nvml, backend)
    session.open()
    return session


@dataclass
class Daemon:
    settings: Settings
    session: NvmlSession
    store: SnapshotStore
    registry: CollectorRegistry
    scheduler: Scheduler
    exposition: ExpositionCache
    sources: list[Source] = field(default_factory=list)
    reload: Callable[[], bool] | None = None
    """Re-reads the configuration (set by the CLI, run on SIGHUP)."""
    _reloads: set[asyncio.Future[bool]] = field(default_factory=set)

    def app(self, middlewares: list[Any] | None = None) -> web.Application:
        app = build_app(
            self.store,
            self.exposition,
            self.session.backend,
            middlewares,
            debug_state=self.settings.debug_state,
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
            self.session.close()

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
        """Apply a reloaded configuration's serving section: it takes effect at the next poll
        (targets added, removed ones and their series gone). What else changed waits for a
        restart (``reload.needs_restart`` says which)."""
        new = settings.serving
        self.settings = self.settings.model_copy(update={"serving": new})
        source = next((s for s in self.sources if s.name == "serving"), None)
        if source is not None:
            source.reconfigure(new)  # type: ignore[attr-defined]
        elif collectors.is_enabled(_serving_collector(), self.settings):
            ctx = collectors.Context(self.settings, self.session, self.store)
            for added in _serving_collector().sources(ctx):
                self.scheduler.add(added)
                if added not in self.sources:
                    self.sources.append(added)


def _serving_collector() -> collectors.Collector:
    return next(c for c in collectors.REGISTRY if c.name == "serving")


def build(settings: Settings, session: NvmlSession) -> Daemon:
    node = settings.node_name
    chosen = collectors.enabled(settings)
    names = {c.name for c in chosen}
    from exporter.sources.profiling.modes import BACKENDS

    # With the nvml collector off nothing lists GPUs: ready at once rather than never.
    ready = ["nvml"] if "nvml" in names else []
    store = SnapshotStore(node, ready_sources=ready, profiling_order=BACKENDS)
    ctx = collectors.Context(settings, session, store)
    sources = [source for c in chosen for source in c.sources(ctx)]
    registry = CollectorRegistry(auto_describe=False)
    metrics = SelfMetrics(registry, node)
    metrics.build_info.labels(node, __version__, session.backend, platform.python_version()).set(1)
    ProcessCollector(registry=registry)
    k8s = settings.kubernetes
    encoder = Encoder(
        collectors.families(chosen, settings),
        registry,
        include_optional=settings.extended_metrics,
        pod_labels=(
            (k8s.namespace_label, k8s.pod_label, k8s.container_label)
            if k8s.enabled and k8s.labels_on_every_series
            else None
        ),
    )
    exposition = ExpositionCache(encoder, lambda: store.current)
    store.subscribe(exposition.published)
    step = None
    if "model" in names:
        step = ModelStep.for_settings(store, settings, metrics)
    scheduler = Scheduler(sources, store, metrics, after_publish=step)
    return Daemon(settings, session, store, registry, scheduler, exposition, sources)
