"""Builds the profiling sources for ``--profiling=auto|gpm|dcgm|dcgm-exporter|off``.

``auto`` runs GPM, DCGM and (when a URL is configured) dcgm-exporter together behind one
:class:`ProfilingSelector`, so each GPU is served by the first that can: GPM on Hopper and
newer, else the node's DCGM host engine, else its dcgm-exporter. A forced mode runs just that
source on every GPU. ``off`` still says so on every GPU, so dashboards show why panels are
empty instead of nothing.
"""

from __future__ import annotations

from typing import Any

import structlog

from exporter.config import Settings
from exporter.snapshot import Sample, SnapshotStore, SourceResult
from exporter.sources.base import Source
from exporter.sources.dcgm import DcgmSource
from exporter.sources.dcgm_exporter import DcgmExporterSource
from exporter.sources.gpm import GpmSource
from exporter.sources.profiling_metrics import unavailable
from exporter.sources.profiling_select import ProfilingSelector, SharedIntegrator

log = structlog.get_logger("profiling")


class ProfilingOffSource(Source):
    """``--profiling=off``: ``goodput_gpu_profiling_available{source="none",reason="off"} 0``."""

    name = "profiling-off"
    interval = 10.0

    def __init__(self, store: SnapshotStore) -> None:
        self.store = store

    async def poll(self) -> SourceResult:
        row = unavailable("none", "off")
        inventory = self.store.current.inventory
        devices: dict[str, tuple[Sample, ...]] = {d.gpu: (row,) for d in inventory}
        return SourceResult(source=self.name, devices=devices)


def build_profiling_sources(settings: Settings, session: Any, store: SnapshotStore) -> list[Source]:
    """The profiling sources for ``settings.profiling.mode``; ``session`` is the NvmlSession
    the NVML source uses (GPM shares its handles)."""
    cfg = settings.profiling
    mode = cfg.mode
    candidates: tuple[str, ...] = ()
    if mode == "auto":
        candidates = ("gpm", "dcgm") + (("dcgm-exporter",) if cfg.dcgm_exporter_url else ())
    selector = ProfilingSelector(candidates) if candidates else None
    # DCGM and dcgm-exporter can hand GPUs to each other in auto mode: one set of counters.
    shared = SharedIntegrator() if selector is not None else None
    sources: list[Source] = []
    if mode in ("auto", "gpm"):
        sources.append(GpmSource(session, interval=settings.interval, selector=selector))
    if mode in ("auto", "dcgm"):
        sources.append(
            DcgmSource(
                store,
                cfg.dcgm_host_engine if mode == "dcgm" else _never_embedded(cfg.dcgm_host_engine),
                interval=cfg.dcgm_interval,
                connect_timeout=cfg.dcgm_connect_timeout,
                bindings_path=cfg.dcgm_bindings_path,
                library_path=cfg.dcgm_library_path,
                selector=selector,
                required=mode == "dcgm",
                integrator=shared,
            )
        )
    if mode == "dcgm-exporter" or (mode == "auto" and cfg.dcgm_exporter_url):
        sources.append(
            DcgmExporterSource(
                store,
                cfg.dcgm_exporter_url,
                interval=cfg.dcgm_exporter_interval,
                timeout=cfg.dcgm_exporter_timeout,
                max_body_bytes=cfg.dcgm_exporter_max_body_bytes,
                selector=selector,
                required=mode == "dcgm-exporter",
                integrator=shared,
            )
        )
    if mode == "off":
        sources.append(ProfilingOffSource(store))
    log.info(
        "profiling_mode",
        mode=mode,
        sources=[s.name for s in sources],
        order=list(candidates) or None,
    )
    return sources


def _never_embedded(host_engine: str) -> str:
    """auto must not start a second host engine next to the node's (perfmon conflict)."""
    if host_engine.strip() == "embedded":
        log.warning(
            "profiling_auto_ignores_embedded",
            hint="use --profiling=dcgm to run an embedded DCGM host engine",
        )
        return "localhost:5555"
    return host_engine
