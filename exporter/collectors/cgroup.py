"""GPU processes to pods through ``/proc/<pid>/cgroup``: each pod's processes and memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context
from exporter.readings import PodUsageReading

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.config import Settings
    from exporter.sources.base import Source


def _on(settings: Settings) -> bool:
    return settings.kubernetes.enabled and settings.kubernetes.processes


def _sources(ctx: Context) -> list[Source]:
    from exporter.sources.kubernetes.processes import PodProcessSource

    store = ctx.store
    return [
        PodProcessSource(
            ctx.settings.kubernetes,
            processes=lambda: store.current.processes,
            pods=lambda: store.current.pods_known,
        )
    ]


def _families(settings: Settings) -> tuple[Group, ...]:
    from exporter.sources.kubernetes.families import usage_families

    k8s = settings.kubernetes
    from exporter.metrics.families import erase

    return (erase(usage_families(k8s.namespace_label, k8s.pod_label, k8s.container_label)),)


COLLECTOR = Collector(
    "cgroup",
    "GPU processes to pods through /proc/<pid>/cgroup (on with --kubernetes)",
    _on,
    _sources,
    _families,
    readings=(PodUsageReading,),
)
