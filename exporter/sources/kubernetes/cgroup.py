"""PID to pod and container, from the text of ``/proc/<pid>/cgroup``.

The kubelet names a pod's cgroup after the pod UID and the runtime names the container's
cgroup after the container id, so both can be read from any process's cgroup path whatever
the cgroup version (v1: one line per hierarchy, v2: ``0::<path>``), driver (systemd slices
with ``_`` for ``-``, or cgroupfs directories), QoS class (Guaranteed pods have no QoS
level) and runtime (containerd, CRI-O, Docker). Paths relative to a cgroup namespace
(``0::/../../kubepods-...``) keep both names, so matching is by pattern, not by prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A pod UID is an RFC 4122 UUID (``-`` turned into ``_`` by the systemd driver); static and
# mirror pods get a 32-hex hash of their manifest instead.
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
    r"|[0-9a-f]{32}(?![0-9a-f]))"
)
_CONTAINER_ID = re.compile(r"(?<![0-9a-f])([0-9a-f]{64})(?![0-9a-f])")
_RUNTIMES = (
    ("cri-containerd", "containerd"),
    ("crio", "cri-o"),
    ("docker", "docker"),
    ("libpod", "podman"),
)


@dataclass(frozen=True, slots=True)
class CgroupRef:
    """Where a process lives: pod UID (with dashes), container id and runtime, when known."""

    pod_uid: str
    container_id: str = ""
    runtime: str = ""


def parse_cgroup(text: str) -> CgroupRef | None:
    """The pod of a process from its ``/proc/<pid>/cgroup`` text; None outside any pod."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        ref = parse_cgroup_path(parts[2])
        if ref is not None:
            return ref
    return None


def parse_cgroup_path(path: str) -> CgroupRef | None:
    """The pod of one cgroup path (either driver), or None if the path is not a pod's."""
    match = _POD_UID.search(path)
    if match is None:
        return None
    uid = match.group(1).replace("_", "-")
    # Everything below the pod's cgroup names the container; CRI-O may add a sub-cgroup
    # (``crio-<id>.scope/container``), so the id is the last one anywhere below the pod.
    below = path[match.end() :]
    ids = _CONTAINER_ID.findall(below)
    if not ids:
        return CgroupRef(uid)
    return CgroupRef(uid, ids[-1], _runtime(below))


def _runtime(below: str) -> str:
    for prefix, runtime in _RUNTIMES:
        if f"/{prefix}-" in below or f":{prefix}:" in below:
            return runtime
    return ""
