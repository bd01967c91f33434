"""Builds the daemon from settings: backend, sources, snapshot store, registry, HTTP app.

Kept apart from the CLI so tests can build a daemon in-process around any NVML module.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from exporter import __version__
from exporter.config import Settings
from exporter.metrics.render import ExpositionCache, SnapshotCollector
from exporter.metrics.self_metrics import SelfMetrics
from exporter.model.source import build_sources as model_sources
from exporter.scheduler import Scheduler
from exporter.server import build_app
from exporter.snapshot import SnapshotStore
from exporter.sources import kubernetes, serving
from exporter.sources.base import Source
from exporter.sources.nvml import NvmlSource
from exporter.sources.nvml_session import NvmlSession
from exporter.sources.profiling_sources import build_profiling_sources
from exporter.sources.xid import XidSource


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
    sources: list[Source] = field(default_factory=list)
    attribution_labels: tuple[str, ...] = ()

    def app(self, middlewares: list[Any] | None = None) -> web.Application:
        exposition = ExpositionCache(self.registry, self.store)
        app = build_app(self.store, exposition, self.session.backend, middlewares)

        async def start(_: web.Application) -> None:
            await self.scheduler.start()

        async def stop(_: web.Application) -> None:
            await self.scheduler.stop()
            self.session.close()

        app.on_startup.append(start)
        app.on_cleanup.append(stop)
        return app


def core_sources(settings: Settings, session: NvmlSession) -> list[Source]:
    return [
        NvmlSource(session, interval=settings.interval),
        XidSource(session, interval=settings.interval),
    ]


def build(settings: Settings, session: NvmlSession) -> Daemon:
    node = settings.node_name
    store = SnapshotStore(node, ready_sources=[NvmlSource.name])
    sources = [
        *core_sources(settings, session),
        *build_profiling_sources(settings, session, store),
        *kubernetes.build_sources(settings, store),
        *serving.build_sources(settings, store),
        *model_sources(settings, store),
    ]
    registry = CollectorRegistry(auto_describe=False)
    metrics = SelfMetrics(registry, node)
    metrics.build_info.labels(node, __version__, session.backend, platform.python_version()).set(1)
    ProcessCollector(registry=registry)
    attribution = kubernetes.attribution_labels(settings)
    registry.register(SnapshotCollector(lambda: store.current, attribution))
    scheduler = Scheduler(sources, store, metrics)
    return Daemon(settings, session, store, registry, scheduler, sources, attribution)
