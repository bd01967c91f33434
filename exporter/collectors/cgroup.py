"""GPU processes to pods through ``/proc/<pid>/cgroup``: each pod's processes and memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context
from exporter.readings import PodUsageReading
from exporter.sources.kubernetes.config import KubernetesConfig

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings
    from exporter.sources.base import Source


def _on(settings: CoreSettings) -> bool:
    k8s = settings.section(KubernetesConfig)
    return k8s.enabled and k8s.processes


def _sources(ctx: Context) -> list[Source]:
    from exporter.sources.kubernetes.processes import PodProcessSource

    store = ctx.store
    return [
        PodProcessSource(
            ctx.settings.section(KubernetesConfig),
            processes=lambda: store.current.processes,
            pods=lambda: store.current.pods_known,
        )
    ]


def _families(settings: CoreSettings) -> tuple[Group, ...]:
    from exporter.sources.kubernetes.families import usage_families

    k8s = settings.section(KubernetesConfig)
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
