"""Which GPUs a target's work runs on.

Rules, first that yields a GPU wins:

1. ``explicit``: the target's ``gpus`` (indexes, MIG keys like ``0-1``, or UUIDs);
2. ``engine_label``: GPU UUIDs the engine itself labels (Triton's ``gpu_uuid``);
3. ``pod``: GPUs the Kubernetes source found allocated to the target's pod;
4. ``process``: GPUs whose NVML compute-process list holds the engine's process or one of
   its descendants (the pid from config, or the process listening on a local target's port).

A discovered pod is a tenant, and its annotations and its engine's labels are written by
that tenant: for such a target the kubelet's assignment is authoritative. Rules 1 and 2 may
only pick among the GPUs the kubelet assigned to the pod; a claim naming any other GPU is
refused (``refused`` set, counted as ``gpus_refused``) and the pod's own assignment is used
instead. Targets from the config file are the operator's word and are taken as written.

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
    allowed: frozenset[str] | None = None
    """For a discovered pod: the GPUs the kubelet assigned it (engine labels may name
    only these); None for a config target."""
    refused: tuple[str, ...] = ()
    """GPUs the pod claimed (annotation or engine label) that the kubelet did not assign."""
    pids: tuple[int, ...] = ()
    """By process: the NVML compute processes that are the engine or its descendants."""


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
    allowed = (
        frozenset(pod_gpus.get((target.namespace, target.pod), ())) if target.pod else None
    )
    refused: list[str] = []
    for refs, via in ((target.gpus, "explicit"), (sorted(engine_uuids), "engine_label")):
        gpus = to_gpu_labels(refs, inventory)
        if gpus and allowed is not None and not set(gpus) <= allowed:
            refused += [g for g in gpus if g not in allowed and g not in refused]
            continue  # a tenant may narrow its assignment, never add to it
        if gpus:
            return Attribution(gpus, via, allowed, tuple(refused))
    if allowed:
        return Attribution(tuple(sorted(allowed)), "pod", allowed, tuple(refused))
    if pid is not None:
        mine = [p for p in processes if descends_from(p.pid, pid)]
        matched = sorted({p.gpu for p in mine})
        if matched:
            pids = tuple(sorted({p.pid for p in mine}))
            return Attribution(tuple(matched), "process", allowed, tuple(refused), pids)
    return Attribution((), "none", allowed, tuple(refused)) if refused else NONE
