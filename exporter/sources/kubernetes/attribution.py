"""From the kubelet's List answer to per-GPU pod labels (pure functions, no I/O).

Label rules (docs/kubernetes.md explains the choice):

* every GPU keeps one series with the same label names whether or not a pod holds it; a GPU
  no pod holds has empty values (Prometheus treats an empty label as absent), so
  ``{pod=""}`` selects unassigned GPUs and nothing flaps when pods come and go;
* a GPU shared by several containers (time-slicing or MPS replicas, ``<uuid>::<n>``) stays
  one series whose values list the holders, sorted by (namespace, pod, container) and joined
  with ``,`` position by position, so sums over GPUs never count a device twice; the
  per-pod split of a shared GPU is ``goodput_gpu_pod_memory_used_bytes``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from exporter.snapshot import Labels
from exporter.sources.kubernetes import podresources_pb2 as pb
from exporter.sources.kubernetes.device_ids import DeviceIndex

JOIN = ","


@dataclass(frozen=True, slots=True)
class LabelNames:
    """The label names attribution values are published under (configurable, so users can
    keep them clear of the target labels Prometheus would rename to ``exported_*``)."""

    namespace: str = "namespace"
    pod: str = "pod"
    container: str = "container"

    def as_tuple(self) -> tuple[str, str, str]:
        return (self.namespace, self.pod, self.container)

    def labels(self, namespace: str, pod: str, container: str) -> Labels:
        return tuple(sorted(zip(self.as_tuple(), (namespace, pod, container), strict=True)))


@dataclass(frozen=True, slots=True)
class ContainerGpus:
    """The GPU devices of one resource the kubelet assigned to one container."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    gpus: tuple[str, ...]

    @property
    def holder(self) -> tuple[str, str, str]:
        return (self.namespace, self.pod, self.container)


def container_gpus(
    response: pb.ListPodResourcesResponse,
    index: DeviceIndex,
    wanted: Callable[[str], bool],
) -> tuple[list[ContainerGpus], list[str]]:
    """GPU assignments per container, and device ids of GPU resources that matched no
    device of the inventory (a plugin naming devices in a way we do not understand)."""
    out: list[ContainerGpus] = []
    unmatched: list[str] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not wanted(devices.resource_name):
                    continue
                ids = tuple(devices.device_ids)
                gpus: set[str] = set()
                for device_id in ids:
                    gpu = index.gpu_for(device_id)
                    if gpu is None:
                        unmatched.append(device_id)
                    else:
                        gpus.add(gpu)
                out.append(
                    ContainerGpus(
                        pod.namespace,
                        pod.name,
                        container.name,
                        devices.resource_name,
                        ids,
                        tuple(sorted(gpus)),
                    )
                )
    return out, unmatched


def holders_by_gpu(assigned: Iterable[ContainerGpus]) -> dict[str, list[tuple[str, str, str]]]:
    """gpu label -> sorted unique (namespace, pod, container) holding it."""
    found: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
    for entry in assigned:
        for gpu in entry.gpus:
            found[gpu].add(entry.holder)
    return {gpu: sorted(holders) for gpu, holders in found.items()}


def device_labels(assigned: Iterable[ContainerGpus], names: LabelNames) -> dict[str, Labels]:
    """Attribution labels of every assigned GPU (unassigned GPUs are absent: the renderer
    gives them empty values)."""
    out: dict[str, Labels] = {}
    for gpu, holders in holders_by_gpu(assigned).items():
        columns = list(zip(*holders, strict=True))
        out[gpu] = names.labels(*(JOIN.join(column) for column in columns))
    return out


def pod_devices(assigned: Iterable[ContainerGpus]) -> Mapping[tuple[str, str], tuple[str, ...]]:
    """(namespace, pod) -> the gpu labels its containers hold (for serving attribution)."""
    found: dict[tuple[str, str], set[str]] = defaultdict(set)
    for entry in assigned:
        if entry.gpus:
            found[(entry.namespace, entry.pod)].update(entry.gpus)
    return {key: tuple(sorted(gpus)) for key, gpus in sorted(found.items())}
