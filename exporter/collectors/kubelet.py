"""GPUs to pods through the kubelet's pod-resources API (and job names from pod labels)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context, Flag
from exporter.readings import PodAssignments, PodJobs
from exporter.sources.kubernetes.config import KubernetesConfig

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings
    from exporter.sources.base import Source


def _on(settings: CoreSettings) -> bool:
    return settings.section(KubernetesConfig).enabled


def _series_labels(settings: CoreSettings) -> tuple[str, str, str] | None:
    k8s = settings.section(KubernetesConfig)
    if not (k8s.enabled and k8s.labels_on_every_series):
        return None
    return (k8s.namespace_label, k8s.pod_label, k8s.container_label)


def _words(settings: CoreSettings) -> dict[str, str | int]:
    return {"kubernetes": "on" if settings.section(KubernetesConfig).enabled else "off"}


def _sources(ctx: Context) -> list[Source]:
    from exporter.sources.kubernetes.kubelet import KubeletSource

    store = ctx.store
    k8s = ctx.settings.section(KubernetesConfig)
    sources: list[Source] = [KubeletSource(k8s, inventory=lambda: store.current.inventory)]
    if k8s.pod_labels:  # job names from the API server; only then is that code imported
        from exporter.sources.kubernetes.podlabels import PodLabelSource

        sources.append(PodLabelSource(k8s, ctx.settings.node_name))
    return sources


def _families(settings: CoreSettings) -> tuple[Group, ...]:
    from exporter.metrics.families import erase
    from exporter.sources.kubernetes.families import attribution_families

    k8s = settings.section(KubernetesConfig)
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
    flags=(
        Flag("--kubernetes", "enabled"),
        Flag("--kubelet-socket", "kubelet_socket", "PATH"),
        Flag("--kubelet-interval", "interval", "SECONDS"),
        Flag("--kubernetes-resource-name", "resource_names", "NAME"),
        Flag("--kubernetes-labels-on-every-series", "labels_on_every_series"),
        Flag("--kubernetes-namespace-label", "namespace_label", "NAME"),
        Flag("--kubernetes-pod-label", "pod_label", "NAME"),
        Flag("--kubernetes-container-label", "container_label", "NAME"),
        Flag("--kubernetes-pod-labels", "pod_labels"),
        Flag("--proc-root", "proc_root", "PATH"),
    ),
    flag_group="kubernetes attribution (docs/kubernetes.md)",
    series_labels=_series_labels,
    words=_words,
)
