"""Serving engines' tokens, requests and KV cache, attributed to GPUs."""

from __future__ import annotations

from exporter.collectors.base import Collector, Context, always
from exporter.config import ServingConfig, Settings
from exporter.metrics.families import Group, erase
from exporter.readings import ServingState
from exporter.sources.base import Source


def _sources(ctx: Context) -> list[Source]:
    cfg = ctx.settings.serving
    if not (cfg.targets or cfg.extra_targets or cfg.discover_pods):
        return []  # nothing to scrape: import none of the serving code
    from exporter.sources import serving

    store = ctx.store
    return serving.build_sources(
        ctx.settings,
        processes=lambda: store.current.processes,
        inventory=lambda: store.current.inventory,
        pods=lambda: store.current.pods,
    )


def _families(_: Settings) -> tuple[Group, ...]:
    from exporter.sources.serving.families import GPU, NODE

    return (erase(GPU), erase(NODE))


COLLECTOR = Collector(
    "serving",
    "tokens, requests and KV cache of serving engines (needs targets or discovery)",
    always,
    _sources,
    _families,
    readings=(ServingState,),
    section="serving",
    config=ServingConfig,
)
