"""/proc/<pid>/cgroup lines as real nodes write them, per runtime, driver and QoS class."""

from __future__ import annotations

import pytest

from exporter.sources.kubernetes.cgroup import CgroupRef, parse_cgroup

UID = "7a3f1c2e-9b4d-4e8a-a1b2-0c9d8e7f6a5b"
U_ = UID.replace("-", "_")
CID = "4f2d9c1b8a7e6d5c4b3a29180f7e6d5c4b3a29180f7e6d5c4b3a29180f7e6d5c"
STATIC = "3c5e8f0a1b2d4c6e8f0a1b2d4c6e8f0a"  # static pods: a hash, not a UUID

V1_SYSTEMD_CONTAINERD = "\n".join(
    [
        f"12:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice/"
        f"cri-containerd-{CID}.scope",
        f"11:cpu,cpuacct:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice/"
        f"cri-containerd-{CID}.scope",
        f"1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice/"
        f"cri-containerd-{CID}.scope",
        "0::/",
    ]
)

CASES = [
    # cgroup v2, systemd driver
    (
        "v2 systemd containerd burstable",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice/"
        f"cri-containerd-{CID}.scope",
        CgroupRef(UID, CID, "containerd"),
    ),
    (
        "v2 systemd containerd besteffort",
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{U_}.slice/"
        f"cri-containerd-{CID}.scope",
        CgroupRef(UID, CID, "containerd"),
    ),
    (
        "v2 systemd containerd guaranteed (no QoS level)",
        f"0::/kubepods.slice/kubepods-pod{U_}.slice/cri-containerd-{CID}.scope",
        CgroupRef(UID, CID, "containerd"),
    ),
    (
        "v2 systemd cri-o",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice/"
        f"crio-{CID}.scope",
        CgroupRef(UID, CID, "cri-o"),
    ),
    (
        "v2 systemd cri-o with container sub-cgroup",
        f"0::/kubepods.slice/kubepods-pod{U_}.slice/crio-{CID}.scope/container",
        CgroupRef(UID, CID, "cri-o"),
    ),
    (
        "v2 systemd cri-dockerd",
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{U_}.slice/"
        f"docker-{CID}.scope",
        CgroupRef(UID, CID, "docker"),
    ),
    (
        "v2 kubelet systemd, runc cgroupfs (mixed)",
        f"0::/kubepods-burstable-pod{U_}.slice:cri-containerd:{CID}",
        CgroupRef(UID, CID, "containerd"),
    ),
    # cgroup v2, cgroupfs driver
    (
        "v2 cgroupfs containerd burstable",
        f"0::/kubepods/burstable/pod{UID}/{CID}",
        CgroupRef(UID, CID, ""),
    ),
    ("v2 cgroupfs guaranteed", f"0::/kubepods/pod{UID}/{CID}", CgroupRef(UID, CID, "")),
    (
        "v2 cgroupfs cri-o besteffort",
        f"0::/kubepods/besteffort/pod{UID}/crio-{CID}",
        CgroupRef(UID, CID, "cri-o"),
    ),
    # cgroup v1
    ("v1 systemd containerd", V1_SYSTEMD_CONTAINERD, CgroupRef(UID, CID, "containerd")),
    (
        "v1 cgroupfs docker",
        f"9:devices:/kubepods/burstable/pod{UID}/{CID}\n1:name=systemd:/kubepods/burstable/"
        f"pod{UID}/{CID}",
        CgroupRef(UID, CID, ""),
    ),
    (
        "v1 with the pod only in some hierarchies",
        f"12:pids:/\n4:memory:/kubepods/pod{UID}/{CID}",
        CgroupRef(UID, CID, ""),
    ),
    (
        "v1 systemd cri-o besteffort",
        f"11:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{U_}.slice/"
        f"crio-{CID}.scope\n1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{U_}.slice/crio-{CID}.scope",
        CgroupRef(UID, CID, "cri-o"),
    ),
    (
        "v1 systemd cri-dockerd guaranteed",
        f"8:devices:/kubepods.slice/kubepods-pod{U_}.slice/docker-{CID}.scope\n"
        f"1:name=systemd:/kubepods.slice/kubepods-pod{U_}.slice/docker-{CID}.scope",
        CgroupRef(UID, CID, "docker"),
    ),
    (
        "v1 cgroupfs cri-o besteffort",
        f"7:memory:/kubepods/besteffort/pod{UID}/crio-{CID}\n"
        f"1:name=systemd:/kubepods/besteffort/pod{UID}/crio-{CID}",
        CgroupRef(UID, CID, "cri-o"),
    ),
    (
        "hybrid: v1 controllers plus the v2 unified hierarchy",
        f"12:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice/"
        f"cri-containerd-{CID}.scope\n0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{U_}.slice/cri-containerd-{CID}.scope",
        CgroupRef(UID, CID, "containerd"),
    ),
    # cgroup namespaces: paths relative to the reader's own cgroup
    (
        "v2 namespace-relative",
        f"0::/../../kubepods-besteffort-pod{U_}.slice/cri-containerd-{CID}.scope",
        CgroupRef(UID, CID, "containerd"),
    ),
    ("v2 namespace-relative cgroupfs", f"0::/../pod{UID}/{CID}", CgroupRef(UID, CID, "")),
    (
        "v1 namespace-relative name=systemd",
        f"4:memory:/\n1:name=systemd:/../../kubepods-burstable-pod{U_}.slice/"
        f"cri-containerd-{CID}.scope",
        CgroupRef(UID, CID, "containerd"),
    ),
    # pod-level cgroups and static pods
    ("pod cgroup without container", f"0::/kubepods.slice/kubepods-pod{U_}.slice", CgroupRef(UID)),
    (
        "static pod (hash uid), systemd",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC}.slice/"
        f"cri-containerd-{CID}.scope",
        CgroupRef(STATIC, CID, "containerd"),
    ),
    ("podman outside kubernetes", f"0::/machine.slice/libpod-{CID}.scope", None),
    # not pods
    ("host process v2", "0::/system.slice/nvidia-persistenced.service", None),
    ("host user session", "0::/user.slice/user-1000.slice/session-3.scope", None),
    ("plain docker outside kubernetes", f"0::/system.slice/docker-{CID}.scope", None),
    ("empty", "", None),
    ("garbage", "not a cgroup file\n::", None),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse_cgroup(text: str, expected: CgroupRef | None) -> None:
    assert parse_cgroup(text) == expected
