"""Cgroup attribution source: GPU memory and process counts per pod, for shared GPUs.

Every ``kubernetes.process_interval`` it takes the compute processes of the latest snapshot
(pid and memory per GPU, from NVML), reads ``<proc_root>/<pid>/cgroup`` for each, and names
the pod:

1. by pod UID, through the kubelet checkpoint joined with the kubelet source's assignments
   (exact, also for several pods time-slicing one GPU);
2. without a readable checkpoint, by elimination: the one pod the kubelet says holds that GPU
   (exact for whole GPUs, ambiguous when several pods share it);
3. otherwise namespace, pod and container stay empty (the process is in a pod we cannot name).

The container is the one container of that pod the kubelet lists on that GPU, else empty:
the API gives container names, cgroups give container ids, and nothing on the node joins the
two without the runtime's or the API server's help. Processes outside any pod are skipped.
Needs ``hostPID: true`` so NVML's host PIDs exist under ``proc_root``.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping, Sequence

import structlog

from exporter.config import KubernetesConfig
from exporter.metrics.catalog import define
from exporter.snapshot import ProcessInfo, Sample, SnapshotStore, SourceResult
from exporter.sources.base import BlockingSource
from exporter.sources.kubernetes.attribution import ContainerGpus, holders_by_gpu
from exporter.sources.kubernetes.cgroup import CgroupRef, parse_cgroup
from exporter.sources.kubernetes.checkpoint import parse_checkpoint, pod_uids
from exporter.sources.kubernetes.kubelet import SOURCE as KUBELET_SOURCE
from exporter.sources.kubernetes.kubelet import label_names
from exporter.sources.kubernetes.status import OnChange, availability

log = structlog.get_logger("cgroup")

SOURCE = "cgroup"

POD_MEMORY_USED = define(
    "goodput_gpu_pod_memory_used_bytes",
    "gauge",
    "Device memory used by the processes of one pod's container on this GPU (sum over its "
    "PIDs). Its namespace/pod/container labels name that pod, not every holder of the GPU.",
    unit="bytes",
    source="kubernetes",
)
POD_PROCESSES = define(
    "goodput_gpu_pod_processes",
    "gauge",
    "Compute processes of one pod's container on this GPU. Its namespace/pod/container "
    "labels name that pod, not every holder of the GPU.",
    source="kubernetes",
)

Holder = tuple[str, str, str]
UNKNOWN: Holder = ("", "", "")


def resolve(
    ref: CgroupRef,
    gpu: str,
    uids: Mapping[str, tuple[str, str]] | None,
    holders: Mapping[str, Sequence[Holder]],
) -> Holder:
    """(namespace, pod, container) of a process in pod ``ref`` running on ``gpu``.

    ``uids`` is None when the checkpoint could not be read (then elimination is allowed).
    """
    on_gpu = holders.get(gpu, ())
    pod = uids.get(ref.pod_uid) if uids else None
    if pod is None:
        if uids is not None:
            return UNKNOWN  # a pod holding no device: it uses a GPU it was not given
        candidates = {(ns, name) for ns, name, _ in on_gpu}
        if len(candidates) != 1:
            return UNKNOWN
        pod = candidates.pop()
    containers = {c for ns, name, c in on_gpu if (ns, name) == pod}
    return (*pod, containers.pop() if len(containers) == 1 else "")


class PodProcessSource(BlockingSource):
    name = SOURCE

    def __init__(self, config: KubernetesConfig, store: SnapshotStore) -> None:
        super().__init__()
        self.interval = config.process_interval
        self._config = config
        self._store = store
        self._names = label_names(config)
        self._checkpoint_state = OnChange(log, "device_checkpoint")

    def collect(self) -> SourceResult:
        root = self._config.proc_root
        if not os.path.isdir(root):
            return self._failed("proc_missing", f"proc root {root} is not a directory")
        snapshot = self._store.current
        kubelet = snapshot.result(KUBELET_SOURCE)
        assigned: tuple[ContainerGpus, ...] = kubelet.extra.get("containers", ()) if kubelet else ()
        processes = snapshot.processes
        refs: list[tuple[ProcessInfo, CgroupRef]] = []
        missing = denied = 0
        for process in processes:
            try:
                with open(os.path.join(root, str(process.pid), "cgroup")) as f:
                    text = f.read()
            except FileNotFoundError:
                missing += 1
                continue
            except PermissionError:
                denied += 1
                continue
            ref = parse_cgroup(text)
            if ref is not None:
                refs.append((process, ref))
        if processes and missing == len(processes):
            return self._failed(
                "no_host_pid",
                f"none of the {missing} GPU process ids exist under {root}: run with hostPID",
            )
        if processes and denied + missing == len(processes) and denied:
            return self._failed("permission_denied", f"cannot read cgroups under {root}")
        uids = self._pod_uids(assigned) if refs else {}
        holders = holders_by_gpu(assigned)
        memory: dict[tuple[str, Holder], int] = defaultdict(int)
        count: dict[tuple[str, Holder], int] = defaultdict(int)
        for process, ref in refs:
            key = (process.gpu, resolve(ref, process.gpu, uids, holders))
            count[key] += 1
            if process.used_memory_bytes is not None:
                memory[key] += process.used_memory_bytes
        devices: dict[str, list[Sample]] = defaultdict(list)
        for key, n in sorted(count.items()):
            gpu, holder = key
            lbl = self._names.labels(*holder)
            devices[gpu].append(Sample(POD_PROCESSES, float(n), lbl))
            if key in memory:
                devices[gpu].append(Sample(POD_MEMORY_USED, float(memory[key]), lbl))
        errors = {"pid_missing": missing} if missing else {}
        if denied:
            errors["permission_denied"] = denied
        return SourceResult(
            source=SOURCE,
            errors=errors,
            node=(availability(SOURCE),),
            devices={gpu: tuple(samples) for gpu, samples in devices.items()},
        )

    def _pod_uids(self, assigned: tuple[ContainerGpus, ...]) -> dict[str, tuple[str, str]] | None:
        """UID -> pod through the checkpoint, or None when it cannot be read."""
        path = self._config.device_checkpoint
        try:
            with open(path) as f:
                entries = parse_checkpoint(f.read())
        except OSError as exc:
            self._checkpoint_state(
                "unreadable",
                "warning",
                path=path,
                error=exc.strerror or str(exc),
                hint="pods sharing a GPU cannot be told apart without it",
            )
            return None
        except ValueError as exc:
            self._checkpoint_state("invalid", "warning", path=path, error=str(exc))
            return None
        self._checkpoint_state("ok", path=path, entries=len(entries))
        return pod_uids(entries, assigned)

    def _failed(self, reason: str, error: str) -> SourceResult:
        return SourceResult(
            source=SOURCE,
            ok=False,
            reason=reason,
            error=error,
            node=(availability(SOURCE, reason),),
        )
