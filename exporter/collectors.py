"""The collector registry: every collector's name, default, sources and metric families.

``daemon.py`` wires only what :func:`enabled` returns; the CLI makes one
``--collector.<name>`` / ``--no-collector.<name>`` pair per entry, the config file takes
``collectors: {<name>: true|false}``, and ``docs/metrics.md`` lists every family of every
entry. Adding a collector means adding one entry here (docs/architecture.md has the recipe).

Imports of a collector's code happen inside its builder, so a disabled collector costs no
memory: with Kubernetes attribution off, no gRPC code is ever imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from exporter.config import Settings
from exporter.metrics.families import Group, erase
from exporter.snapshot import SnapshotStore
from exporter.sources.base import Source
from exporter.sources.nvml_session import NvmlSession


@dataclass(frozen=True)
class Context:
    """What builders may use: the settings, the shared NVML session and the store (whose
    ``current`` they may only pass on as a view to the sources that declared a need)."""

    settings: Settings
    session: NvmlSession
    store: SnapshotStore


@dataclass(frozen=True)
class Collector:
    name: str
    help: str
    default: Callable[[Settings], bool]
    sources: Callable[[Context], list[Source]]
    families: Callable[[Settings], tuple[Group, ...]]


def _always(_: Settings) -> bool:
    return True


def _nvml_sources(ctx: Context) -> list[Source]:
    from exporter.sources.nvml import NvmlSource

    return [NvmlSource(ctx.session, interval=ctx.settings.interval)]


def _nvml_families(_: Settings) -> tuple[Group, ...]:
    from exporter.sources.nvml import FAMILIES, IDENTITY

    return (erase(IDENTITY), erase(FAMILIES))


def _xid_sources(ctx: Context) -> list[Source]:
    from exporter.sources.xid import XidSource

    return [XidSource(ctx.session, interval=ctx.settings.interval)]


def _xid_families(_: Settings) -> tuple[Group, ...]:
    from exporter.sources.xid import FAMILIES

    return (erase(FAMILIES),)


def _profiling_sources(ctx: Context) -> list[Source]:
    from exporter.sources.profiling.build import build_profiling_sources

    store = ctx.store
    return build_profiling_sources(
        ctx.settings, ctx.session, inventory=lambda: store.current.inventory
    )


def _profiling_families(_: Settings) -> tuple[Group, ...]:
    from exporter.sources.profiling.families import AVAILABILITY, FAMILIES

    return (erase(AVAILABILITY), erase(FAMILIES))


def _kubernetes_on(settings: Settings) -> bool:
    return settings.kubernetes.enabled


def _kubelet_sources(ctx: Context) -> list[Source]:
    from exporter.sources.kubernetes.kubelet import KubeletSource

    store = ctx.store
    k8s = ctx.settings.kubernetes
    sources: list[Source] = [KubeletSource(k8s, inventory=lambda: store.current.inventory)]
    if k8s.pod_labels:  # job names from the API server; only then is that code imported
        from exporter.sources.kubernetes.podlabels import PodLabelSource

        sources.append(PodLabelSource(k8s, ctx.settings.node_name))
    return sources


def _cgroup_sources(ctx: Context) -> list[Source]:
    from exporter.sources.kubernetes.processes import PodProcessSource

    store = ctx.store
    return [
        PodProcessSource(
            ctx.settings.kubernetes,
            processes=lambda: store.current.processes,
            pods=lambda: store.current.pods_known,
        )
    ]


def _kubernetes_families(settings: Settings) -> tuple[Group, ...]:
    from exporter.sources.kubernetes.families import families

    k8s = settings.kubernetes
    info, usage, status = families(k8s.namespace_label, k8s.pod_label, k8s.container_label)
    return (erase(info), erase(usage), erase(status))


def _serving_sources(ctx: Context) -> list[Source]:
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


def _serving_families(_: Settings) -> tuple[Group, ...]:
    from exporter.sources.serving.families import GPU, NODE

    return (erase(GPU), erase(NODE))


def _model_families(_: Settings) -> tuple[Group, ...]:
    from exporter.model.families import GPU, NODE

    return (erase(GPU), erase(NODE))


def _none(_: Context) -> list[Source]:
    return []


REGISTRY: tuple[Collector, ...] = (
    Collector(
        "nvml",
        "identity, health, utilization, memory, power, energy, clocks, ECC of every GPU",
        _always,
        _nvml_sources,
        _nvml_families,
    ),
    Collector("xid", "XID critical-error events", _always, _xid_sources, _xid_families),
    Collector(
        "profiling",
        "SM active, occupancy, tensor, DRAM, pipes, PCIe/NVLink (GPM, DCGM or dcgm-exporter; "
        "see --profiling; with --profiling off it says so on every GPU)",
        _always,
        _profiling_sources,
        _profiling_families,
    ),
    Collector(
        "kubelet",
        "GPUs to pods through the kubelet pod-resources API (on with --kubernetes)",
        _kubernetes_on,
        _kubelet_sources,
        _kubernetes_families,
    ),
    Collector(
        "cgroup",
        "GPU processes to pods through /proc/<pid>/cgroup (on with --kubernetes)",
        lambda s: s.kubernetes.enabled and s.kubernetes.processes,
        _cgroup_sources,
        lambda _: (),
    ),
    Collector(
        "serving",
        "tokens, requests and KV cache of serving engines (needs targets or discovery)",
        _always,
        _serving_sources,
        _serving_families,
    ),
    Collector(
        "model",
        "the efficiency model: regime, busy-but-unproductive, J/token, MFU, stragglers",
        _always,
        _none,
        _model_families,
    ),
)
NAMES: tuple[str, ...] = tuple(c.name for c in REGISTRY)


def is_enabled(collector: Collector, settings: Settings) -> bool:
    choice = settings.collectors.get(collector.name)
    return collector.default(settings) if choice is None else choice


def enabled(settings: Settings) -> list[Collector]:
    return [c for c in REGISTRY if is_enabled(c, settings)]


def families(collectors: Iterable[Collector], settings: Settings) -> list[Group]:
    """The family groups of ``collectors``, in registry order."""
    return [group for collector in collectors for group in collector.families(settings)]
