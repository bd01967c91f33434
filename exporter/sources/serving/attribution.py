"""Which GPUs a target's work runs on.

Rules, first that yields a GPU wins:

1. ``explicit``: the target's ``gpus`` (indexes, MIG keys like ``0-1``, or UUIDs);
2. ``engine_label``: GPU UUIDs the engine itself labels (Triton's ``gpu_uuid``);
3. ``pod``: GPUs the Kubernetes source found allocated to the target's pod;
4. ``process``: GPUs whose NVML compute-process list holds the engine's process or one of
   its descendants (the pid from config, or the process listening on a local target's port).

An engine on several GPUs (tensor or pipeline parallel) has its counters of engine-wide
work (tokens, requests finished, preemptions) divided evenly among them; gauges every rank
shares (running, waiting, KV usage) and per-GPU or wall-time counters (estimated FLOPs per
GPU, busy seconds) are given whole to each.

The rules read typed views (inventory, pod assignments, NVML processes), never the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from exporter.readings import Device, ProcessInfo
from exporter.sources.serving.targets import Target

PodGpus = Mapping[tuple[str, str], tuple[str, ...]]
"""(namespace, pod) -> the gpu labels its containers hold."""


@dataclass(frozen=True)
class Attribution:
    gpus: tuple[str, ...]
    via: str  # explicit | engine_label | pod | process | none


NONE = Attribution((), "none")


def to_gpu_labels(refs: Iterable[str], inventory: Sequence[Device]) -> tuple[str, ...]:
    """Map indexes/UUIDs to ``gpu`` labels. Without an inventory, indexes pass through."""
    by_uuid = {d.uuid: d.gpu for d in inventory}
    known = {d.gpu for d in inventory}
    out: list[str] = []
    for ref in refs:
        if ref.startswith(("GPU-", "MIG-")):
            label = by_uuid.get(ref)  # a UUID is only usable once NVML has listed it
        else:
            label = ref if (ref in known or not inventory) else None
        if label is not None and label not in out:
            out.append(label)
    return tuple(out)


def resolve(
    target: Target,
    engine_uuids: Iterable[str],
    inventory: Sequence[Device],
    pod_gpus: PodGpus,
    processes: Sequence[ProcessInfo],
    pid: int | None,
    descends_from: Callable[[int, int], bool],
) -> Attribution:
    """GPUs of ``target`` by the rules above; ``descends_from(pid, ancestor)`` is procfs's."""
    if target.gpus:
        gpus = to_gpu_labels(target.gpus, inventory)
        if gpus:
            return Attribution(gpus, "explicit")
    gpus = to_gpu_labels(sorted(engine_uuids), inventory)
    if gpus:
        return Attribution(gpus, "engine_label")
    if target.pod:
        found = pod_gpus.get((target.namespace, target.pod))
        if found:
            return Attribution(tuple(sorted(found)), "pod")
    if pid is not None:
        matched = sorted({p.gpu for p in processes if descends_from(p.pid, pid)})
        if matched:
            return Attribution(tuple(matched), "process")
    return NONE
