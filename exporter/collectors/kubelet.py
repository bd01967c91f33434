"""GPUs to pods through the kubelet's pod-resources API (and job names from pod labels)."""

from __future__ import annotations

from exporter.collectors.base import Collector, Context
from exporter.config import KubernetesConfig, Settings
from exporter.metrics.families import Group, erase
from exporter.readings import PodAssignments, PodJobs
from exporter.sources.base import Source


def _on(settings: Settings) -> bool:
    return settings.kubernetes.enabled


def _sources(ctx: Context) -> list[Source]:
    from exporter.sources.kubernetes.kubelet import KubeletSource

    store = ctx.store
    k8s = ctx.settings.kubernetes
    sources: list[Source] = [KubeletSource(k8s, inventory=lambda: store.current.inventory)]
    if k8s.pod_labels:  # job names from the API server; only then is that code imported
        from exporter.sources.kubernetes.podlabels import PodLabelSource

        sources.append(PodLabelSource(k8s, ctx.settings.node_name))
    return sources


def _families(settings: Settings) -> tuple[Group, ...]:
    from exporter.sources.kubernetes.families import attribution_families

    k8s = settings.kubernetes
    info, status = attribution_families(k8s.namespace_label, k8s.pod_label, k8s.container_label)
    return (erase(info), erase(status))


COLLECTOR = Collector(
    "kubelet",
    "GPUs to pods through the kubelet pod-resources API (on with --kubernetes)",
    _on,
    _sources,
    _families,
    readings=(PodAssignments, PodJobs),
    section="kubernetes",
    config=KubernetesConfig,
)
