"""Matching the kubelet's device ids to the exporter's devices.

Device plugins name what they hand out in their own words. NVIDIA's k8s-device-plugin uses
GPU UUIDs (``GPU-...``), MIG UUIDs (``MIG-...``; before driver R470 ``MIG-GPU-<uuid>/<gi>/<ci>``),
``<id>::<n>`` for the n-th replica of a time-sliced or MPS-shared device, or plain indexes
with ``DEVICE_ID_STRATEGY=index``; GKE's plugin uses ``nvidia<i>``, ``nvidia<i>/gi<g>`` and
``nvidia<i>/vgpu<n>``. All of them resolve to a ``gpu`` label of the inventory here.

Dynamic Resource Allocation names devices differently: NVIDIA's DRA driver for GPUs
(``gpu.nvidia.com``) calls a whole GPU ``gpu-<minor>`` and a MIG device
``gpu-<parent minor>-mig-<profile...>``, with CDI device ids ``k8s.gpu.nvidia.com/device=<name>``
(per-claim ones ``k8s.gpu.nvidia.com/claim=<claim uid>-<name>``). A CDI id or device name that
is a GPU or MIG UUID matches by UUID; otherwise ``gpu-<n>`` is taken to be NVML index n (the
device minor equals the index on ordinary nodes), and a MIG name matches the parent's one MIG
instance when it has exactly one (the name carries a placement NVML's instance list does not).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

from exporter.readings import Device

BUILTIN_RESOURCES: tuple[str, ...] = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")
"""Resource names (fnmatch patterns) attributed without any configuration."""

_LEGACY_MIG = re.compile(r"^mig-(gpu-[0-9a-f-]+)/(\d+)/(\d+)$")
_GKE = re.compile(r"^nvidia(\d+)(?:/gi(\d+))?(?:/vgpu\d+)?$")
_DRA_GPU = re.compile(r"^gpu-(\d+)$")
_DRA_MIG = re.compile(r"^gpu-(\d+)-mig-")
BUILTIN_DRA_DRIVERS: tuple[str, ...] = ("gpu.nvidia.com",)
"""DRA driver names (fnmatch patterns) whose devices are GPUs."""


def resource_matcher(extra_patterns: Iterable[str] = ()) -> ResourceMatcher:
    return ResourceMatcher((*BUILTIN_RESOURCES, *extra_patterns))


class ResourceMatcher:
    """Whether an extended resource name is one whose devices are GPUs."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)

    def __call__(self, resource_name: str) -> bool:
        return any(fnmatch.fnmatchcase(resource_name, p) for p in self.patterns)


def strip_replica(device_id: str) -> str:
    """``GPU-x::3`` -> ``GPU-x``: replicas of a shared device are the device."""
    return device_id.split("::", 1)[0]


class DeviceIndex:
    """Looks up a device id in one inventory; built once per inventory."""

    def __init__(self, inventory: Iterable[Device]) -> None:
        self._by_uuid: dict[str, str] = {}
        self._by_mig: dict[tuple[str, str], str] = {}
        self._labels: set[str] = set()
        self._whole: set[str] = set()
        self._migs_of: dict[str, list[str]] = {}
        for device in inventory:
            self._labels.add(device.gpu)
            if device.is_mig:
                self._migs_of.setdefault(device.gpu.split("-", 1)[0], []).append(device.gpu)
            if device.uuid:
                self._by_uuid[device.uuid.lower()] = device.gpu
            if device.is_mig:
                self._by_mig[(device.parent_uuid.lower(), device.gpu_instance_id)] = device.gpu
            else:
                self._whole.add(device.gpu)

    def gpu_for(self, device_id: str) -> str | None:
        """The ``gpu`` label of the device ``device_id`` names, or None if none matches."""
        key = strip_replica(device_id.strip()).lower()
        if key in self._by_uuid:
            return self._by_uuid[key]
        legacy = _LEGACY_MIG.match(key)
        if legacy:
            return self._by_mig.get((legacy.group(1), legacy.group(2)))
        gke = _GKE.match(key)
        if gke:
            label = gke.group(1) if gke.group(2) is None else f"{gke.group(1)}-{gke.group(2)}"
            return label if label in self._labels else None
        if key.isdigit() and key in self._whole:
            return key
        return None

    def gpu_for_dra(self, device_name: str, cdi_ids: Iterable[str] = ()) -> str | None:
        """The ``gpu`` label of a device a DRA driver allocated (see the module docstring)."""
        for cdi in cdi_ids:
            value = cdi.rsplit("=", 1)[-1].strip().lower()
            if value in self._by_uuid:
                return self._by_uuid[value]
        name = device_name.strip().lower()
        if name in self._by_uuid:
            return self._by_uuid[name]
        whole = _DRA_GPU.match(name)
        if whole:
            return whole.group(1) if whole.group(1) in self._whole else None
        mig = _DRA_MIG.match(name)
        if mig:
            migs = self._migs_of.get(mig.group(1), [])
            return migs[0] if len(migs) == 1 else None
        return None
