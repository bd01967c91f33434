"""PID -> pod attribution: the cgroup source over a proc tree, with the kubelet stand-in."""

from __future__ import annotations

import json
from pathlib import Path

from structlog.testing import capture_logs

from exporter.readings import PodAssignments, ProcessInfo
from exporter.snapshot import Snapshot, SourceResult
from exporter.sources.kubernetes.checkpoint import parse_checkpoint
from exporter.sources.kubernetes.config import KubernetesConfig
from exporter.sources.kubernetes.kubelet import KubeletSource
from exporter.sources.kubernetes.processes import PodProcessSource
from testkit.kubelet import KubeletStandIn, pod
from tests.kubernetes.conftest import INVENTORY, UUIDS

UID_A = "aaaaaaaa-0000-4000-8000-00000000000a"
UID_B = "bbbbbbbb-0000-4000-8000-00000000000b"
UID_X = "cccccccc-0000-4000-8000-00000000000c"  # a pod that was given no GPU
SHARED = "nvidia.com/gpu.shared"
GiB = 1 << 30


def container_cgroup(uid: str, n: int) -> str:
    cid = f"{n:064x}"
    return (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n"
    )


def write_proc(root: Path, cgroups: dict[int, str]) -> None:
    for pid, text in cgroups.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cgroup").write_text(text)


def write_checkpoint(path: Path, entries: list[tuple[str, str, str, list[str]]]) -> None:
    path.write_text(
        json.dumps(
            {
                "Data": {
                    "PodDeviceEntries": [
                        {
                            "PodUID": uid,
                            "ContainerName": c,
                            "ResourceName": r,
                            "DeviceIDs": {"0": ids},
                            "AllocResp": "CgA=",
                        }
                        for uid, c, r, ids in entries
                    ],
                    "RegisteredDevices": {SHARED: [f"{UUIDS[2]}::{i}" for i in range(4)]},
                },
                "Checksum": 1,
            }
        )
    )


Usage = dict[tuple[str, str, str], tuple[int, float | None]]
PROCESSES = (
    ProcessInfo("2", 101, 2 * GiB),
    ProcessInfo("2", 102, 1 * GiB),
    ProcessInfo("2", 201, 5 * GiB),
    ProcessInfo("2", 301, 1 * GiB),
    ProcessInfo("2", 401, 1 * GiB),
    ProcessInfo("0", 501, None),
    ProcessInfo("2", 999, 1 * GiB),  # exited since NVML listed it
)


def usage_by_pod(result: SourceResult, gpu: str) -> Usage:
    """(namespace, pod, container) -> (processes, memory used) on ``gpu``."""
    assert result.reading is not None
    return {
        (u.namespace, u.pod, u.container): (u.processes, u.memory_used_bytes)
        for u in result.reading.pods
        if u.gpu == gpu
    }


def status(result: SourceResult) -> str:
    [available] = result.availability
    assert available.source == "cgroup"
    return available.reason


def cgroup_source(
    config: KubernetesConfig,
    processes: tuple[ProcessInfo, ...] = PROCESSES,
    pods: PodAssignments | None = None,
) -> PodProcessSource:
    return PodProcessSource(
        config, processes=lambda: processes, pods=lambda: pods or PodAssignments()
    )


async def setup(
    tmp_path: Path, kubelet: tuple[KubeletStandIn, str], checkpoint: bool
) -> tuple[PodProcessSource, KubernetesConfig]:
    """A proc tree and checkpoint, and the cgroup source fed by a kubelet poll."""
    standin, path = kubelet
    standin.pods = [
        pod("infer", "decode-a", {"server": [(SHARED, [f"{UUIDS[2]}::0"])]}),
        pod("infer", "decode-b", {"server": [(SHARED, [f"{UUIDS[2]}::3"])]}),
        pod("ml", "trainer", {"main": [("nvidia.com/gpu", [UUIDS[0]])]}),
    ]
    proc = tmp_path / "proc"
    write_proc(
        proc,
        {
            101: container_cgroup(UID_A, 1),
            102: container_cgroup(UID_A, 1),
            201: container_cgroup(UID_B, 2),
            301: container_cgroup(UID_X, 3),
            401: "0::/system.slice/some-daemon.service\n",
            501: container_cgroup("dddddddd-0000-4000-8000-00000000000d", 5),
        },
    )
    ckpt = tmp_path / "kubelet_internal_checkpoint"
    if checkpoint:
        write_checkpoint(
            ckpt,
            [
                (UID_A, "server", SHARED, [f"{UUIDS[2]}::0"]),
                (UID_B, "server", SHARED, [f"{UUIDS[2]}::3"]),
                ("dddddddd-0000-4000-8000-00000000000d", "main", "nvidia.com/gpu", [UUIDS[0]]),
            ],
        )
    config = KubernetesConfig(
        enabled=True, kubelet_socket=path, proc_root=str(proc), device_checkpoint=str(ckpt)
    )
    kubelet_source = KubeletSource(config, inventory=lambda: INVENTORY)
    pods = (await kubelet_source.poll()).reading
    await kubelet_source.close()
    return cgroup_source(config, pods=pods), config


async def test_pods_sharing_a_gpu_are_told_apart_by_uid(
    tmp_path: Path, kubelet: tuple[KubeletStandIn, str]
) -> None:
    src, _ = await setup(tmp_path, kubelet, checkpoint=True)
    result = src.poll_blocking()
    assert result.ok and status(result) == ""
    assert usage_by_pod(result, "2") == {
        ("infer", "decode-a", "server"): (2, 3 * GiB),
        ("infer", "decode-b", "server"): (1, 5 * GiB),
        # a pod that was given no GPU but runs on one: its UID is in no assignment
        ("", "", ""): (1, 1 * GiB),
    }
    # memory unknown (None) -> only the count
    assert usage_by_pod(result, "0") == {("ml", "trainer", "main"): (1, None)}
    assert result.errors == {"pid_missing": 1}


async def test_without_checkpoint_only_unambiguous_gpus_are_named(
    tmp_path: Path, kubelet: tuple[KubeletStandIn, str]
) -> None:
    src, _ = await setup(tmp_path, kubelet, checkpoint=False)
    result = src.poll_blocking()
    assert result.ok
    assert usage_by_pod(result, "0") == {("ml", "trainer", "main"): (1, None)}
    assert usage_by_pod(result, "2") == {("", "", ""): (4, 9 * GiB)}


async def test_no_host_pid_and_missing_proc(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    config = KubernetesConfig(enabled=True, proc_root=str(tmp_path / "proc"))
    result = cgroup_source(config, processes=(ProcessInfo("0", 4242, GiB),)).poll_blocking()
    assert not result.ok and status(result) == "no_host_pid"
    assert "hostPID" in result.error and result.reading.pods == ()
    missing = cgroup_source(config.model_copy(update={"proc_root": str(tmp_path / "x")}))
    assert status(missing.poll_blocking()) == "proc_missing"


async def test_no_processes_is_fine(tmp_path: Path) -> None:
    result = cgroup_source(KubernetesConfig(proc_root=str(tmp_path)), processes=()).poll_blocking()
    assert result.ok and status(result) == "" and result.reading.pods == ()


def test_checkpoint_formats() -> None:
    numa = (
        '{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c",'
        '"ResourceName":"r","DeviceIDs":{"0":["a"],"1":["b"]},"AllocResp":""}]},"Checksum":1}'
    )
    legacy = (
        '{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c",'
        '"ResourceName":"r","DeviceIDs":["a","b"],"AllocResp":""}]},"Checksum":1}'
    )
    assert parse_checkpoint(numa) == parse_checkpoint(legacy)
    assert parse_checkpoint(numa)[0].device_ids == frozenset({"a", "b"})
    assert parse_checkpoint('{"Data":{"PodDeviceEntries":null}}') == []
    for bad in ("", "[]", '{"Data":{}}', '{"Data":{"PodDeviceEntries":[{"PodUID":"u"}]}}'):
        try:
            parse_checkpoint(bad)
        except ValueError as exc:
            assert str(exc).startswith("not a device-manager checkpoint")
        else:
            raise AssertionError(f"accepted {bad!r}")


async def test_invalid_checkpoint_falls_back(
    tmp_path: Path, kubelet: tuple[KubeletStandIn, str]
) -> None:
    src, config = await setup(tmp_path, kubelet, checkpoint=False)
    Path(config.device_checkpoint).write_text("{not json")
    with capture_logs() as logs:
        results = [src.poll_blocking() for _ in range(3)]
    assert all(r.ok and ("ml", "trainer", "main") in usage_by_pod(r, "0") for r in results)
    states = [e["state"] for e in logs if e["event"] == "device_checkpoint"]
    assert states == ["invalid"]  # once per change, not per poll


async def test_waits_for_the_kubelets_first_answer(tmp_path: Path) -> None:
    """Before the kubelet has answered once (its failed poll publishes no assignments), the
    cgroup source names no pods and publishes no usage: "no pods" would be a lie."""
    (tmp_path / "proc").mkdir()
    config = KubernetesConfig(
        enabled=True, kubelet_socket=str(tmp_path / "nope.sock"), proc_root=str(tmp_path / "proc")
    )
    kubelet_source = KubeletSource(config, inventory=lambda: INVENTORY)
    failed = await kubelet_source.poll()
    await kubelet_source.close()
    snap = Snapshot(node_name="n", results={"kubelet": failed})
    assert snap.pods_known is None and snap.pods == PodAssignments()
    src = PodProcessSource(config, processes=lambda: PROCESSES, pods=lambda: snap.pods_known)
    result = src.poll_blocking()
    assert result.ok and result.reading is None and status(result) == "kubelet_pending"
