"""Wires the serving source from the settings: static targets, pod discovery, the views
of other sources it attributes with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

from exporter.readings import Device, PodAssignments, ProcessInfo
from exporter.settings.core import CoreSettings
from exporter.sources.base import Source
from exporter.sources.kubernetes.config import KubernetesConfig
from exporter.sources.serving.config import ServingConfig

log = structlog.get_logger("serving")


def build_sources(
    settings: CoreSettings,
    *,
    processes: Callable[[], Sequence[ProcessInfo]] = tuple,
    inventory: Callable[[], Sequence[Device]] = tuple,
    pods: Callable[[], PodAssignments] = PodAssignments,
    kube_api: Any = None,
) -> list[Source]:
    """The serving source, if any target is configured or pod discovery is on.

    Targets come from ``settings.serving.targets`` and ``.extra_targets`` (the
    ``--serving-target`` URLs). ``processes``, ``inventory`` and ``pods`` are views of what
    the NVML and Kubernetes sources last read, for GPU attribution; ``kube_api`` (a
    ``CoreV1Api``) overrides the in-cluster/kubeconfig client, for tests.
    """
    from exporter.sources.serving.discovery import PodWatcher
    from exporter.sources.serving.source import ServingSource
    from exporter.sources.serving.targets import TargetSet, static_targets

    config = settings.section(ServingConfig)
    targets = TargetSet(
        static_targets(config), config.max_targets, config.max_targets_per_namespace
    )
    watcher = None
    if config.discover_pods:
        api = kube_api if kube_api is not None else _kube_api()
        if api is not None:
            watcher = PodWatcher(
                api,
                settings.node_name,
                config.annotation_prefix,
                targets.set_discovered,
                on_rejected=targets.set_rejected,
            )
    if not targets() and watcher is None:
        return []
    # The host's /proc (where NVML's PIDs live) is shared with the Kubernetes sources.
    proc_root = Path(settings.section(KubernetesConfig).proc_root)
    return [
        ServingSource(
            config,
            targets,
            inventory=inventory,
            processes=processes,
            pods=pods,
            proc_root=proc_root,
            discovery=watcher,
        )
    ]


def _kube_api() -> Any:
    """A CoreV1Api from the in-cluster service account, else the local kubeconfig."""
    try:
        from kubernetes import client, config
    except ImportError:
        log.error(
            "serving_discovery_unavailable",
            error="the kubernetes package is missing: install the package's [kubernetes] extra"
            " (pip install '.[kubernetes]' in the source tree; image: scripts/image.sh"
            " --extras kubernetes)",
        )
        return None
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        try:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        except Exception as exc:
            log.error("serving_discovery_unavailable", error=f"no Kubernetes config: {exc}")
            return None
    return client.CoreV1Api()
