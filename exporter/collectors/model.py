"""The efficiency model: not a source; the scheduler steps it after GPU polls."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context, always, no_sources
from exporter.model.config import ModelConfig

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.metrics.self_metrics import SelfMetrics
    from exporter.settings.core import CoreSettings
    from exporter.snapshot import SourceResult


def _families(settings: CoreSettings) -> tuple[Group, ...]:
    from exporter.metrics.families import erase
    from exporter.model.families import GPU, JOB_INFO, NODE, holder_families
    from exporter.sources.kubernetes.config import KubernetesConfig

    k8s = settings.section(KubernetesConfig)
    holders = holder_families(k8s.namespace_label, k8s.pod_label, k8s.container_label)
    return (erase(GPU), erase(JOB_INFO), erase(NODE), erase(holders))


def _step(
    ctx: Context, metrics: SelfMetrics, triggers: frozenset[str]
) -> Callable[[SourceResult], None]:
    from exporter.model.step import ModelStep

    return ModelStep.for_settings(ctx.store, ctx.settings, metrics, triggers)


COLLECTOR = Collector(
    "model",
    "the efficiency model: regime, busy-but-unproductive, J/token, MFU, stragglers",
    always,
    no_sources,
    _families,
    section="model",
    config=ModelConfig,
    after_gpu_poll=_step,
)
