"""Kubernetes attribution: GPUs to pods (kubelet pod-resources API) and GPU processes to
pods (cgroups). See docs/kubernetes.md.

The CLI wires it with two calls: :func:`attribution_labels` for the renderer's
``attribution_labels`` and :func:`build_sources` for the scheduler.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter.config import Settings
    from exporter.snapshot import SnapshotStore
    from exporter.sources.base import Source


def attribution_labels(settings: Settings) -> tuple[str, ...]:
    """Label names the renderer appends to every per-GPU series; empty when disabled."""
    k8s = settings.kubernetes
    if not k8s.enabled:
        return ()
    return (k8s.namespace_label, k8s.pod_label, k8s.container_label)


def build_sources(settings: Settings, store: SnapshotStore) -> list[Source]:
    """The attribution sources to schedule (none unless ``kubernetes.enabled``)."""
    k8s = settings.kubernetes
    if not k8s.enabled:
        return []
    # Imported here so a node without Kubernetes never loads gRPC.
    from exporter.sources.kubernetes.kubelet import KubeletSource
    from exporter.sources.kubernetes.processes import PodProcessSource

    sources: list[Source] = [KubeletSource(k8s, store)]
    if k8s.processes:
        sources.append(PodProcessSource(k8s, store))
    return sources
