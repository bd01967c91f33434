"""The profiling section (``profiling:``), next to the backends that read it."""

from __future__ import annotations

from pydantic import Field, model_validator

from exporter.settings.section import Section
from exporter.sources.profiling.modes import Mode


class ProfilingConfig(Section):
    """Which source fills the profiling counters (SM active, tensor, DRAM, ...).

    ``auto`` decides per GPU: NVML GPM where the GPU supports it (Hopper and newer), else a
    DCGM host engine if one answers at ``dcgm_host_engine``, else ``dcgm_exporter_url`` if set.
    See docs/profiling.md.
    """

    mode: Mode = "auto"
    """Where profiling counters come from: auto picks GPM on Hopper and newer, else DCGM if a
    host engine answers, else dcgm-exporter if configured."""
    dcgm_host_engine: str = "localhost:5555"
    """DCGM host engine: HOST:PORT, unix:///path/to/socket, or embedded (start one
    in-process, needs SYS_ADMIN; never chosen by auto since a second engine fights the
    node's one for the profiler)."""
    dcgm_bindings_path: str = ""
    """Directory holding DCGM's Python bindings (dcgm_agent.py ...); searched before the
    standard install locations."""
    dcgm_library_path: str = ""
    """Directory holding libdcgm.so.4, when it is not on the loader's default path."""
    dcgm_interval: float = Field(1.0, ge=0.1, le=60)
    """Seconds between DCGM reads."""
    dcgm_connect_timeout: float = Field(2.0, gt=0, le=60)
    """Seconds to wait for the DCGM host engine to answer a connect."""
    dcgm_exporter_url: str = ""
    """A node-local dcgm-exporter /metrics to take profiling counters from, e.g.
    http://localhost:9400/metrics."""
    dcgm_exporter_interval: float = Field(5.0, ge=0.5, le=300)
    """Seconds between scrapes of dcgm-exporter."""
    dcgm_exporter_timeout: float = Field(2.0, gt=0, le=60)
    """Seconds one dcgm-exporter scrape may take."""
    dcgm_exporter_max_body_bytes: int = Field(16 * 1024 * 1024, gt=0)
    """A dcgm-exporter body larger than this is refused (a cap before parsing)."""

    @model_validator(mode="after")
    def _check_mode(self) -> ProfilingConfig:
        if self.mode == "dcgm-exporter" and not self.dcgm_exporter_url:
            raise ValueError("profiling.mode dcgm-exporter needs profiling.dcgm_exporter_url")
        if self.dcgm_exporter_url:
            from exporter.urls import normalise

            normalise(self.dcgm_exporter_url, "profiling.dcgm_exporter_url")
        return self
