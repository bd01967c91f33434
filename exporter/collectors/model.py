"""The efficiency model: not a source; the scheduler steps it after GPU polls."""

from __future__ import annotations

from exporter.collectors.base import Collector, always, no_sources
from exporter.config import ModelConfig, Settings
from exporter.metrics.families import Group, erase


def _families(_: Settings) -> tuple[Group, ...]:
    from exporter.model.families import GPU, NODE

    return (erase(GPU), erase(NODE))


COLLECTOR = Collector(
    "model",
    "the efficiency model: regime, busy-but-unproductive, J/token, MFU, stragglers",
    always,
    no_sources,
    _families,
    section="model",
    config=ModelConfig,
)
