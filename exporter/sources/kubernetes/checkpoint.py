"""Pod UIDs to pod names through the kubelet's device-manager checkpoint.

A process's cgroup names its pod by UID, but the pod-resources API names pods by namespace
and name only. The kubelet's checkpoint (``/var/lib/kubelet/device-plugins/
kubelet_internal_checkpoint``, JSON) records, per pod UID and container, the device ids it
assigned. Those exact ids also appear in the List answer next to the pod's name, and a
device id is held by one live container at a time (shared GPUs get distinct ``::n`` replica
ids), so joining the two on (container, resource, device ids) names each UID that holds a
device, with no API-server access. The file is the kubelet's internal state, not an API:
if its shape changes the join finds nothing and the cgroup source falls back (see
docs/kubernetes.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from exporter.readings import ContainerGpus

Key = tuple[str, str, frozenset[str]]


@dataclass(frozen=True, slots=True)
class CheckpointEntry:
    pod_uid: str
    container: str
    resource: str
    device_ids: frozenset[str]

    @property
    def key(self) -> Key:
        return (self.container, self.resource, self.device_ids)


def parse_checkpoint(text: str) -> list[CheckpointEntry]:
    """Entries of a checkpoint; ValueError (one line) if it is not one."""
    try:
        data = json.loads(text)
        entries = data["Data"]["PodDeviceEntries"] or []
        return [_entry(raw) for raw in entries]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a device-manager checkpoint: {type(exc).__name__}: {exc}") from None


def _entry(raw: dict[str, Any]) -> CheckpointEntry:
    ids = raw["DeviceIDs"]
    # Since Kubernetes 1.20 ids are grouped by NUMA node ({"0": [...]}); before, a list.
    flat = [i for group in ids.values() for i in group] if isinstance(ids, dict) else list(ids)
    return CheckpointEntry(
        str(raw["PodUID"]),
        str(raw["ContainerName"]),
        str(raw["ResourceName"]),
        frozenset(str(i) for i in flat),
    )


def pod_uids(
    entries: Iterable[CheckpointEntry], assigned: Iterable[ContainerGpus]
) -> dict[str, tuple[str, str]]:
    """pod UID -> (namespace, pod) for every UID whose assignment appears in both."""
    by_key: dict[Key, tuple[str, str] | None] = {}
    for container in assigned:
        key = (container.container, container.resource, frozenset(container.device_ids))
        pod = (container.namespace, container.pod)
        by_key[key] = pod if by_key.get(key, pod) == pod else None  # ambiguous: drop
    out: dict[str, tuple[str, str]] = {}
    for entry in entries:
        named = by_key.get(entry.key)
        if named is not None:
            out[entry.pod_uid] = named
    return out
