"""From the kubelet's List answer to typed GPU assignments (pure functions, no I/O).

A GPU shared by several containers (time-slicing or MPS replicas, ``<uuid>::<n>``) is
held by each of them: ``goodput_gpu_pod_info`` gets one series per holder, and the per-pod
split of what a shared GPU does is ``goodput_gpu_pod_memory_used_bytes``.

Devices allocated through Dynamic Resource Allocation (``ContainerResources.dynamic_resources``,
listed by kubelets with DRA in the PodResources API) become ContainerGpus too, with the DRA
driver as the resource and ``<pool>/<device>`` as the device id. A claim shared by several
containers or pods (or one device shared through ``share_id``) gives each of them a holder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from exporter.readings import ContainerGpus
from exporter.sources.kubernetes.device_ids import DeviceIndex

if TYPE_CHECKING:
    from exporter.sources.kubernetes import podresources_pb2 as pb

Holder = tuple[str, str, str]
"""(namespace, pod, container)."""


def container_gpus(
    response: pb.ListPodResourcesResponse,
    index: DeviceIndex,
    wanted: Callable[[str], bool],
    dra_driver: Callable[[str], bool] = lambda _: False,
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
            for claim in container.dynamic_resources:
                for entry in _dra_gpus(pod, container.name, claim, index, dra_driver, unmatched):
                    out.append(entry)
    return out, unmatched


def _dra_gpus(
    pod: pb.PodResources,
    container: str,
    claim: pb.DynamicResource,
    index: DeviceIndex,
    dra_driver: Callable[[str], bool],
    unmatched: list[str],
) -> Iterable[ContainerGpus]:
    """One ContainerGpus per GPU driver of one claim: DRA devices of that driver."""
    by_driver: dict[str, tuple[list[str], set[str]]] = {}
    for resource in claim.claim_resources:
        if not dra_driver(resource.driver_name):
            continue
        device_id = f"{resource.pool_name}/{resource.device_name}"
        ids, gpus = by_driver.setdefault(resource.driver_name, ([], set()))
        ids.append(device_id)
        gpu = index.gpu_for_dra(resource.device_name, (c.name for c in resource.cdi_devices))
        if gpu is None:
            unmatched.append(device_id)
        else:
            gpus.add(gpu)
    for driver, (ids, gpus) in sorted(by_driver.items()):
        yield ContainerGpus(
            pod.namespace, pod.name, container, driver, tuple(ids), tuple(sorted(gpus))
        )


def holders_by_gpu(assigned: Iterable[ContainerGpus]) -> dict[str, tuple[Holder, ...]]:
    """gpu label -> sorted unique (namespace, pod, container) holding it, in one pass."""
    found: dict[str, set[Holder]] = {}
    for entry in assigned:
        for gpu in entry.gpus:
            found.setdefault(gpu, set()).add(entry.holder)
    return {gpu: tuple(sorted(holders)) for gpu, holders in found.items()}
