"""Cgroup attribution source: GPU memory and process counts per pod, for shared GPUs.

Every ``kubernetes.process_interval`` it takes the compute processes NVML last listed (pid
and memory per GPU), reads ``<proc_root>/<pid>/cgroup`` for each, and names the pod:

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
from collections.abc import Callable, Mapping, Sequence

import structlog

from exporter.readings import (
    Availability,
    ContainerGpus,
    PodAssignments,
    PodUsage,
    PodUsageReading,
    ProcessInfo,
)
from exporter.snapshot import SourceResult
from exporter.sources.base import BlockingSource
from exporter.sources.kubernetes.attribution import Holder, holders_by_gpu
from exporter.sources.kubernetes.cgroup import CgroupRef, parse_cgroup
from exporter.sources.kubernetes.checkpoint import parse_checkpoint, pod_uids
from exporter.sources.kubernetes.config import KubernetesConfig
from exporter.util import OnChange

log = structlog.get_logger("cgroup")

SOURCE = "cgroup"
UNKNOWN: Holder = ("", "", "")

Processes = Callable[[], tuple[ProcessInfo, ...]]
"""The compute processes of the last GPU poll (a view of the snapshot)."""
Pods = Callable[[], PodAssignments | None]
"""The kubelet source's last assignments (a view of the snapshot), None until it answered."""
PENDING = "kubelet_pending"


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


def usage(found: Sequence[tuple[ProcessInfo, Holder]]) -> tuple[PodUsage, ...]:
    """Processes and memory summed per (gpu, holder); memory None when NVML gave none."""
    pids: dict[tuple[str, Holder], list[int]] = {}
    memory: dict[tuple[str, Holder], int] = {}
    for process, holder in found:
        key = (process.gpu, holder)
        pids.setdefault(key, []).append(process.pid)
        if process.used_memory_bytes is not None:
            memory[key] = memory.get(key, 0) + process.used_memory_bytes
    return tuple(
        PodUsage(
            gpu,
            *holder,
            processes=len(held),
            memory_used_bytes=_float(memory.get((gpu, holder))),
            pids=tuple(sorted(held)),
        )
        for (gpu, holder), held in sorted(pids.items())
    )


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


class PodProcessSource(BlockingSource):
    name = SOURCE

    def __init__(self, config: KubernetesConfig, processes: Processes, pods: Pods) -> None:
        super().__init__()
        self.interval = config.process_interval
        self._config = config
        self._processes = processes
        self._pods = pods
        self._log = OnChange(log)

    def poll_blocking(self) -> SourceResult:
        root = self._config.proc_root
        if not os.path.isdir(root):
            return self._failed("proc_missing", f"proc root {root} is not a directory")
        pods = self._pods()
        if pods is None:  # naming pods needs the kubelet's assignments: publish nothing yet
            return SourceResult(source=SOURCE, availability=(Availability(SOURCE, PENDING),))
        processes = self._processes()
        assigned = pods.containers
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
        found = [(p, resolve(ref, p.gpu, uids, holders)) for p, ref in refs]
        errors = {"pid_missing": missing} if missing else {}
        if denied:
            errors["permission_denied"] = denied
        return SourceResult(
            source=SOURCE,
            errors=errors,
            reading=PodUsageReading(usage(found)),
            availability=(Availability(SOURCE),),
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
        self._checkpoint_state("ok", "info", path=path, entries=len(entries))
        return pod_uids(entries, assigned)

    def _checkpoint_state(self, state: str, level: str, **fields: object) -> None:
        self._log("checkpoint", state, None, event="device_checkpoint", level=level, **fields)

    def _failed(self, reason: str, error: str) -> SourceResult:
        return SourceResult(
            source=SOURCE,
            ok=False,
            reason=reason,
            error=error,
            reading=PodUsageReading(),
            availability=(Availability(SOURCE, reason),),
        )
