"""Kubelet attribution source: which pod and container holds each GPU.

Calls the pod-resources ``List`` once per ``kubernetes.interval`` (default 10 s; the
kubelet rate-limits this API) and never on a scrape. Each result replaces the previous one,
so pods that are gone lose their ``goodput_gpu_pod_info`` series on the next poll. While
the kubelet is unreachable the last assignments are kept for ``stale_after`` seconds (a
kubelet restart must not make every series flap), then GPUs show as unassigned; GPU metrics
flow either way, and ``goodput_attribution_available{source="kubelet"}`` says why.

The scheduler runs the first poll as soon as the GPU inventory is known, and the client
checks the socket file before dialling, so a missing or unusable socket shows at start, not
after a gRPC connect timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from exporter.readings import Availability, Device, PodAssignments
from exporter.snapshot import SourceResult
from exporter.sources.base import Source
from exporter.sources.kubernetes.attribution import container_gpus
from exporter.sources.kubernetes.config import KubernetesConfig
from exporter.sources.kubernetes.device_ids import (
    BUILTIN_DRA_DRIVERS,
    DeviceIndex,
    ResourceMatcher,
    resource_matcher,
)
from exporter.sources.kubernetes.podresources import KubeletError, PodResourcesClient
from exporter.util import OnChange

log = structlog.get_logger("kubelet")

SOURCE = "kubelet"

Inventory = Callable[[], tuple[Device, ...]]
"""The devices the GPU source discovered (a view of the snapshot, read at each poll)."""


class KubeletSource(Source):
    name = SOURCE

    def __init__(self, config: KubernetesConfig, inventory: Inventory) -> None:
        self.interval = config.interval
        self._config = config
        self._inventory = inventory
        self._client = PodResourcesClient(config.kubelet_socket, config.timeout)
        self._wanted = resource_matcher(config.resource_names)
        self._dra = ResourceMatcher((*BUILTIN_DRA_DRIVERS, *config.dra_drivers))
        self._index: tuple[tuple[Device, ...], DeviceIndex] | None = None
        self._log = OnChange(log)
        self._checked_allocatable = False
        self._last_good: tuple[float, PodAssignments] | None = None

    def _device_index(self, inventory: tuple[Device, ...]) -> DeviceIndex:
        if self._index is None or self._index[0] != inventory:
            self._index = (inventory, DeviceIndex(inventory))
        return self._index[1]

    async def poll(self) -> SourceResult:
        inventory = self._inventory()
        try:
            response = await self._client.list()
        except KubeletError as exc:
            return self._failed(exc)
        assigned, unmatched = container_gpus(
            response, self._device_index(inventory), self._wanted, self._dra
        )
        errors: dict[str, int] = {}
        if inventory:  # before the GPU source's first poll nothing can match
            if unmatched:
                errors["unmatched_device"] = len(unmatched)
            self._log_unmatched(unmatched)
            if not self._checked_allocatable:
                await self._check_allocatable(inventory)
        pods = PodAssignments(tuple(assigned))
        self._last_good = (time.monotonic(), pods)
        return SourceResult(
            source=SOURCE, errors=errors, reading=pods, availability=(Availability(SOURCE),)
        )

    def _failed(self, exc: KubeletError) -> SourceResult:
        """A failed List: the poll fails (the scheduler logs it once per reason) and the
        last assignments stay while they are younger than ``stale_after``. Before the first
        answer it publishes no assignments at all (None), so no one reads "no pods" into it."""
        pods: PodAssignments | None = None
        if self._last_good is not None:
            pods = PodAssignments()
            at, last = self._last_good
            if time.monotonic() - at <= self._config.stale_after:
                pods = last
        return SourceResult(
            source=SOURCE,
            ok=False,
            reason=exc.reason,
            error=str(exc),
            reading=pods,
            availability=(Availability(SOURCE, exc.reason),),
        )

    def _log_unmatched(self, device_ids: list[str]) -> None:
        ids = tuple(sorted(set(device_ids)))
        if not ids:
            self._log.reset("unmatched", ids)
            return
        self._log(
            "unmatched",
            ids,
            (),
            event="kubelet_device_unmatched",
            level="warning",
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
