"""Kubelet attribution source: which pod and container holds each GPU.

Calls the pod-resources ``List`` once per ``kubernetes.interval`` (default 10 s; the
kubelet rate-limits this API) and never on a scrape. Each result replaces the previous one,
so pods that are gone lose their labels on the next poll. While the kubelet is unreachable
the last mapping is kept for ``stale_after`` seconds (a kubelet restart must not make every
label flap), then GPUs show as unassigned; GPU metrics flow either way.

Publishes ``device_labels`` (gpu -> namespace/pod/container labels), ``extra["pod_devices"]``
((namespace, pod) -> gpu labels) and ``extra["containers"]`` (the raw assignments, which the
cgroup source joins with pod UIDs).
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from exporter.config import KubernetesConfig
from exporter.snapshot import Device, SnapshotStore, SourceResult
from exporter.sources.base import Source
from exporter.sources.kubernetes.attribution import (
    LabelNames,
    container_gpus,
    device_labels,
    pod_devices,
)
from exporter.sources.kubernetes.device_ids import DeviceIndex, resource_matcher
from exporter.sources.kubernetes.podresources import KubeletError, PodResourcesClient
from exporter.sources.kubernetes.status import availability

log = structlog.get_logger("kubelet")

SOURCE = "kubelet"


def label_names(config: KubernetesConfig) -> LabelNames:
    return LabelNames(config.namespace_label, config.pod_label, config.container_label)


class KubeletSource(Source):
    name = SOURCE

    def __init__(self, config: KubernetesConfig, store: SnapshotStore) -> None:
        self.interval = config.interval
        self._config = config
        self._store = store
        self._client = PodResourcesClient(config.kubelet_socket, config.timeout)
        self._wanted = resource_matcher(config.resource_names)
        self._names = label_names(config)
        self._index: tuple[tuple[Device, ...], DeviceIndex] | None = None
        self._unmatched_logged: set[str] = set()
        self._checked_allocatable = False
        self._last_good: tuple[float, SourceResult] | None = None

    def _device_index(self, inventory: tuple[Device, ...]) -> DeviceIndex:
        if self._index is None or self._index[0] != inventory:
            self._index = (inventory, DeviceIndex(inventory))
        return self._index[1]

    async def poll(self) -> SourceResult:
        inventory = self._store.current.inventory
        try:
            response = await self._client.list()
        except KubeletError as exc:
            return self._failed(exc)
        assigned, unmatched = container_gpus(response, self._device_index(inventory), self._wanted)
        errors: dict[str, int] = {}
        if inventory:  # before the GPU source's first poll nothing can match
            if unmatched:
                errors["unmatched_device"] = len(unmatched)
                self._log_unmatched(unmatched)
            if not self._checked_allocatable:
                await self._check_allocatable(inventory)
        result = SourceResult(
            source=SOURCE,
            errors=errors,
            node=(availability(SOURCE),),
            device_labels=device_labels(assigned, self._names),
            extra={"pod_devices": pod_devices(assigned), "containers": tuple(assigned)},
        )
        self._last_good = (time.monotonic(), result)
        return result

    def _failed(self, exc: KubeletError) -> SourceResult:
        keep: dict[str, Any] = {"device_labels": {}, "extra": {"pod_devices": {}, "containers": ()}}
        if self._last_good is not None:
            at, last = self._last_good
            if time.monotonic() - at <= self._config.stale_after:
                keep = {"device_labels": last.device_labels, "extra": last.extra}
        return SourceResult(
            source=SOURCE,
            ok=False,
            reason=exc.reason,
            error=str(exc),
            node=(availability(SOURCE, exc.reason),),
            **keep,
        )

    def _log_unmatched(self, device_ids: list[str]) -> None:
        new = sorted(set(device_ids) - self._unmatched_logged)
        if new:
            self._unmatched_logged.update(new)
            log.warning(
                "kubelet_device_unmatched",
                device_ids=new,
                hint="device ids of a GPU resource match no GPU/MIG UUID or index on this node",
            )

    async def _check_allocatable(self, inventory: tuple[Device, ...]) -> None:
        """Once: say which GPU devices the kubelet can hand out that NVML does not know
        (a device-id strategy mismatch shows here before any pod asks for a GPU)."""
        self._checked_allocatable = True
        try:
            response = await self._client.allocatable()
        except KubeletError as exc:  # older kubelets lack it; attribution does not need it
            log.info("kubelet_allocatable_unavailable", reason=exc.reason, error=str(exc))
            return
        index = self._device_index(inventory)
        ids = [
            device_id
            for devices in response.devices
            if self._wanted(devices.resource_name)
            for device_id in devices.device_ids
        ]
        missing = [i for i in ids if index.gpu_for(i) is None]
        log.info("kubelet_allocatable", gpu_device_ids=len(ids), unmatched=missing[:16])

    async def close(self) -> None:
        await self._client.close()
