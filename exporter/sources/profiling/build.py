"""Builds the profiling sources for ``--profiling=auto|gpm|dcgm|dcgm-exporter|off``.

``auto`` runs GPM, DCGM and (when a URL is configured) dcgm-exporter together behind one
:class:`~exporter.sources.profiling.select.ProfilingSelector`, so each GPU is served by the
first that can: GPM on Hopper and newer, else the node's DCGM host engine, else its
dcgm-exporter. A forced mode runs just that source on every GPU. ``off`` still says so on
every GPU, so dashboards show why panels are empty instead of nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from exporter.readings import Device, ProfilingReading, ProfilingStatus
from exporter.settings.core import CoreSettings
from exporter.snapshot import SourceResult
from exporter.sources.base import Source
from exporter.sources.nvml_session import NvmlSession
from exporter.sources.profiling.config import ProfilingConfig
from exporter.sources.profiling.integrator import ProfilingIntegrator
from exporter.sources.profiling.modes import BACKENDS
from exporter.sources.profiling.select import ProfilingSelector

__all__ = ["BACKENDS", "ProfilingOffSource", "build_profiling_sources"]

log = structlog.get_logger("profiling")

Inventory = Callable[[], tuple[Device, ...]]


class ProfilingOffSource(Source):
    """``--profiling=off``: ``goodput_gpu_profiling_available{source="none",reason="off"} 0``
    on every GPU, so an empty panel says why."""

    name = "profiling-off"
    interval = 10.0

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory

    async def poll(self) -> SourceResult:
        off = ProfilingStatus("none", False, "off")
        return SourceResult(
            source=self.name, reading=ProfilingReading({d.gpu: off for d in self.inventory()})
        )


def build_profiling_sources(
    settings: CoreSettings, session: NvmlSession, inventory: Inventory
) -> list[Source]:
    """The profiling sources for ``settings.profiling.mode``. ``session`` is the NVML session
    the NVML source uses (GPM shares its handles); DCGM and dcgm-exporter match their rows to
    ``inventory()`` by UUID."""
    cfg = settings.section(ProfilingConfig)
    mode = cfg.mode
    candidates: tuple[str, ...] = ()
    if mode == "auto":
        candidates = tuple(b for b in BACKENDS if b != "dcgm-exporter" or cfg.dcgm_exporter_url)
    selector = ProfilingSelector(candidates) if candidates else None
    # Backends hand GPUs to each other in auto mode: one set of counters, no jumps.
    integrator = ProfilingIntegrator()
    sources: list[Source] = []
    if mode in ("auto", "gpm"):
        from exporter.sources.profiling.gpm import GpmSource

        gpm = GpmSource(session, interval=settings.interval, selector=selector)
        gpm.use_integrator(integrator)
        sources.append(gpm)
    if mode in ("auto", "dcgm"):
        sources.append(_dcgm(cfg, mode, inventory, selector, integrator))
    if mode == "dcgm-exporter" or (mode == "auto" and cfg.dcgm_exporter_url):
        from exporter.sources.profiling.dcgm_exporter import DcgmExporterSource

        sources.append(
            DcgmExporterSource(
                inventory,
                cfg.dcgm_exporter_url,
                interval=cfg.dcgm_exporter_interval,
                timeout=cfg.dcgm_exporter_timeout,
                max_body_bytes=cfg.dcgm_exporter_max_body_bytes,
                selector=selector,
                required=mode == "dcgm-exporter",
                integrator=integrator,
            )
        )
    if mode == "off":
        sources.append(ProfilingOffSource(inventory))
    log.debug(
        "profiling_mode",
        mode=mode,
        sources=[s.name for s in sources],
        order=list(candidates) or None,
    )
    return sources


def _dcgm(
    cfg: ProfilingConfig,
    mode: str,
    inventory: Inventory,
    selector: ProfilingSelector | None,
    integrator: ProfilingIntegrator,
) -> Source:
    from exporter.sources.profiling.dcgm import DcgmSource

    host_engine = cfg.dcgm_host_engine if mode == "dcgm" else _never_embedded(cfg.dcgm_host_engine)
    return DcgmSource(
        inventory,
        host_engine,
        interval=cfg.dcgm_interval,
        connect_timeout=cfg.dcgm_connect_timeout,
        bindings_path=cfg.dcgm_bindings_path,
        library_path=cfg.dcgm_library_path,
        selector=selector,
        required=mode == "dcgm",
        integrator=integrator,
    )


def _never_embedded(host_engine: str) -> str:
    """auto must not start a second host engine next to the node's (perfmon conflict)."""
    if host_engine.strip() == "embedded":
        log.warning(
            "profiling_auto_ignores_embedded",
            hint="use --profiling=dcgm to run an embedded DCGM host engine",
        )
        return "localhost:5555"
    return host_engine
