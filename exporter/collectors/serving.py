"""Serving engines' tokens, requests and KV cache, attributed to GPUs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context, Flag, always
from exporter.readings import ServingState
from exporter.sources.serving.config import ServingConfig

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings
    from exporter.sources.base import Source


def _sources(ctx: Context) -> list[Source]:
    cfg = ctx.settings.section(ServingConfig)
    if not (cfg.targets or cfg.extra_targets or cfg.discover_pods):
        return []  # nothing to scrape: import none of the serving code
    from exporter.sources.serving.build import build_sources

    store = ctx.store
    return build_sources(
        ctx.settings,
        processes=lambda: store.current.processes,
        inventory=lambda: store.current.inventory,
        pods=lambda: store.current.pods,
    )


def _words(settings: CoreSettings) -> dict[str, str | int]:
    cfg = settings.section(ServingConfig)
    targets = len(cfg.targets) + len(cfg.extra_targets)
    return {"serving_targets": targets if targets or not cfg.discover_pods else "discovered"}


def _reconfigure(running: Sequence[Source], ctx: Context) -> list[Source]:
    """A reload's serving section goes to the running source (targets added, removed ones
    and their series gone at the next poll); with none running yet, it starts one."""
    from exporter.sources.serving.source import ServingSource

    mine = [s for s in running if isinstance(s, ServingSource)]
    for source in mine:
        source.reconfigure(ctx.settings.section(ServingConfig))
    return [] if mine else _sources(ctx)


def _families(_: CoreSettings) -> tuple[Group, ...]:
    from exporter.metrics.families import erase
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
    flags=(
        Flag("--serving-target", "extra_targets", "URL"),
        Flag("--discover-serving-pods", "discover_pods"),
    ),
    flag_group="serving engines (docs/serving.md)",
    live=frozenset({
        "targets", "extra_targets", "interval", "timeout", "max_body_bytes", "max_targets",
        "max_targets_per_namespace", "max_models_per_target", "max_label_length", "stale_after",
        "max_tokens_per_second_per_gpu",
    }),
    reconfigure=_reconfigure,
    words=_words,
)
