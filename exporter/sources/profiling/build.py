"""Temporary: replaced by the profiling package's builder."""

from __future__ import annotations

from exporter.config import Settings
from exporter.sources.base import Source
from exporter.sources.nvml_session import NvmlSession

PREFERENCE: tuple[str, ...] = ("gpm", "dcgm", "dcgm-exporter")


def build_profiling_sources(settings: Settings, session: NvmlSession) -> list[Source]:
    return []
