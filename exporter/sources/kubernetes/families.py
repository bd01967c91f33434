"""Kubernetes families: which pods hold a GPU (one info series per GPU and container, joined
in PromQL) and what each pod's processes use on it. Label names are configurable, so the
families are built from the settings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exporter.metrics.families import Family, GpuFamilies, NodeFamilies, Row
from exporter.readings import Availability, PodUsage, PodUsageReading
from exporter.snapshot import Snapshot

Holder = tuple[str, str, str, str]
"""(namespace, pod, container, job_name)."""


def _holders(snap: Snapshot) -> Mapping[str, tuple[Holder, ...]]:
    """gpu -> sorted unique holders, for the GPUs of the inventory that have any (one pass
    over the assignments: this runs on every publish)."""
    found: dict[str, set[Holder]] = {}
    for entry in snap.pods.containers:
        for gpu in entry.gpus:
            found.setdefault(gpu, set()).add((*entry.holder, entry.job))
    return {d.gpu: tuple(sorted(found[d.gpu])) for d in snap.inventory if d.gpu in found}


def _usage(snap: Snapshot) -> Mapping[str, tuple[PodUsage, ...]]:
    out: dict[str, list[PodUsage]] = {}
    reading = snap.get(PodUsageReading)
    for usage in reading.pods if reading is not None else ():
        out.setdefault(usage.gpu, []).append(usage)
    return {gpu: tuple(rows) for gpu, rows in out.items()}


def _pod_info(holders: tuple[Holder, ...]) -> Iterable[Row]:
    # job_name is empty unless kubernetes.pod_labels reads the pods' labels: the
    # pod-resources API names pods but carries none of their labels.
    return ((holder, 1.0) for holder in holders)


def _usage_rows(rows: tuple[PodUsage, ...], memory: bool) -> Iterable[Row]:
    for u in rows:
        value = u.memory_used_bytes if memory else float(u.processes)
        if value is not None:
            yield (u.namespace, u.pod, u.container), value


def _availability(rows: tuple[Availability, ...]) -> Iterable[Row]:
    return (((a.source, a.reason), 1.0 if a.ok else 0.0) for a in rows)


def attribution_families(
    namespace: str = "namespace", pod: str = "pod", container: str = "container"
) -> tuple[GpuFamilies[tuple[Holder, ...]], NodeFamilies[tuple[Availability, ...]]]:
    """The kubelet collector's: which pods hold each GPU, and whether attribution works."""
    names = (namespace, pod, container)
    info = GpuFamilies[tuple[Holder, ...]](
        "kubelet",
        _holders,
        (
            Family(
                "goodput_gpu_pod_info",
                "gauge",
                "Constant 1 per GPU and container the kubelet assigned it to; join on node "
                "and gpu to attribute any GPU series to pods (a shared GPU has one series "
                "per holder). job_name is the pod's job label (kubernetes.job_labels) when "
                "kubernetes.pod_labels reads them, else empty.",
                _pod_info,
                labels=(*names, "job_name"),
            ),
        ),
    )
    status = NodeFamilies[tuple[Availability, ...]](
        "kubelet",
        lambda snap: snap.availability or None,
        (
            Family(
                "goodput_attribution_available",
                "gauge",
                "1 if attribution of GPUs to pods works through `source` (kubelet: "
                "pod-resources API; cgroup: PID to pod through /proc/<pid>/cgroup); 0 with "
                "`reason` (socket_missing, permission_denied, unavailable, timeout, "
                "rate_limited, error, proc_missing, no_host_pid, kubelet_pending; pod_labels: "
                "no_token, forbidden, invalid, timeout, unavailable) if not. GPU metrics flow "
                "either way.",
                _availability,
                labels=("source", "reason"),
            ),
        ),
    )
    return info, status


def usage_families(
    namespace: str = "namespace", pod: str = "pod", container: str = "container"
) -> GpuFamilies[tuple[PodUsage, ...]]:
    """The cgroup collector's: what each pod's processes use on a GPU."""
    names = (namespace, pod, container)
    usage = GpuFamilies[tuple[PodUsage, ...]](
        "cgroup",
        _usage,
        (
            Family(
                "goodput_gpu_pod_memory_used_bytes",
                "gauge",
                "Device memory used by the processes of one pod's container on this GPU "
                "(sum over its PIDs).",
                lambda rows: _usage_rows(rows, memory=True),
                labels=names,
                unit="bytes",
            ),
            Family(
                "goodput_gpu_pod_processes",
                "gauge",
                "Compute processes of one pod's container on this GPU.",
                lambda rows: _usage_rows(rows, memory=False),
                labels=names,
            ),
        ),
    )
    return usage


def families(
    namespace: str = "namespace", pod: str = "pod", container: str = "container"
) -> tuple[
    GpuFamilies[tuple[Holder, ...]],
    GpuFamilies[tuple[PodUsage, ...]],
    NodeFamilies[tuple[Availability, ...]],
]:
    """All Kubernetes families (info, usage, status), for tests that encode them together."""
    info, status = attribution_families(namespace, pod, container)
    return info, usage_families(namespace, pod, container), status
