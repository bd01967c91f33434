"""PID -> pod attribution: the cgroup source over a proc tree, with the kubelet stand-in."""

from __future__ import annotations

import json
from pathlib import Path

from exporter.config import KubernetesConfig
from exporter.snapshot import ProcessInfo, SnapshotStore, SourceResult
from exporter.sources.kubernetes.checkpoint import parse_checkpoint
from exporter.sources.kubernetes.kubelet import KubeletSource
from exporter.sources.kubernetes.processes import (
    POD_MEMORY_USED,
    POD_PROCESSES,
    PodProcessSource,
)
from exporter.sources.kubernetes.status import ATTRIBUTION_AVAILABLE
from tests.kubernetes.conftest import INVENTORY, UUIDS
from tests.kubernetes.kubelet_standin import KubeletStandIn, pod

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


def samples_by_pod(result: SourceResult, gpu: str) -> dict[tuple[str, str, str], dict[str, float]]:
    out: dict[tuple[str, str, str], dict[str, float]] = {}
    for s in result.devices.get(gpu, ()):
        lbl = dict(s.labels)
        out.setdefault((lbl["namespace"], lbl["pod"], lbl["container"]), {})[s.name] = s.value
    return out


def status(result: SourceResult) -> tuple[float, str]:
    [s] = [s for s in result.node if s.name == ATTRIBUTION_AVAILABLE]
    return s.value, dict(s.labels)["reason"]


async def setup(
    tmp_path: Path, kubelet: tuple[KubeletStandIn, str], checkpoint: bool
) -> tuple[SnapshotStore, KubernetesConfig]:
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
    store = SnapshotStore("node-a")
    store.publish(
        SourceResult(
            source="nvml",
            inventory=INVENTORY,
            processes=(
                ProcessInfo("2", 101, 2 * GiB),
                ProcessInfo("2", 102, 1 * GiB),
                ProcessInfo("2", 201, 5 * GiB),
                ProcessInfo("2", 301, 1 * GiB),
                ProcessInfo("2", 401, 1 * GiB),
                ProcessInfo("0", 501, None),
                ProcessInfo("2", 999, 1 * GiB),  # exited since NVML listed it
            ),
        )
    )
    store.publish(await KubeletSource(config, store).poll())
    return store, config


async def test_pods_sharing_a_gpu_are_told_apart_by_uid(
    tmp_path: Path, kubelet: tuple[KubeletStandIn, str]
) -> None:
    store, config = await setup(tmp_path, kubelet, checkpoint=True)
    result = PodProcessSource(config, store).collect()
    assert result.ok and status(result) == (1.0, "")
    assert samples_by_pod(result, "2") == {
        ("infer", "decode-a", "server"): {POD_PROCESSES: 2, POD_MEMORY_USED: 3 * GiB},
        ("infer", "decode-b", "server"): {POD_PROCESSES: 1, POD_MEMORY_USED: 5 * GiB},
        # a pod that was given no GPU but runs on one: its UID is in no assignment
        ("", "", ""): {POD_PROCESSES: 1, POD_MEMORY_USED: 1 * GiB},
    }
    # memory unknown (None) -> only the count
    assert samples_by_pod(result, "0") == {("ml", "trainer", "main"): {POD_PROCESSES: 1}}
    assert result.errors == {"pid_missing": 1}


async def test_without_checkpoint_only_unambiguous_gpus_are_named(
    tmp_path: Path, kubelet: tuple[KubeletStandIn, str]
) -> None:
    store, config = await setup(tmp_path, kubelet, checkpoint=False)
    result = PodProcessSource(config, store).collect()
    assert result.ok
    assert samples_by_pod(result, "0") == {("ml", "trainer", "main"): {POD_PROCESSES: 1}}
    assert samples_by_pod(result, "2") == {
        ("", "", ""): {POD_PROCESSES: 4, POD_MEMORY_USED: 9 * GiB},
    }


async def test_no_host_pid_and_missing_proc(tmp_path: Path) -> None:
    store = SnapshotStore("n")
    store.publish(
        SourceResult(source="nvml", inventory=INVENTORY, processes=(ProcessInfo("0", 4242, GiB),))
    )
    (tmp_path / "proc").mkdir()
    config = KubernetesConfig(enabled=True, proc_root=str(tmp_path / "proc"))
    result = PodProcessSource(config, store).collect()
    assert not result.ok and status(result) == (0.0, "no_host_pid")
    assert "hostPID" in result.error
    missing = PodProcessSource(
        config.model_copy(update={"proc_root": str(tmp_path / "x")}), store
    ).collect()
    assert status(missing) == (0.0, "proc_missing")


async def test_no_processes_is_fine(tmp_path: Path) -> None:
    store = SnapshotStore("n")
    store.publish(SourceResult(source="nvml", inventory=INVENTORY, processes=()))
    result = PodProcessSource(KubernetesConfig(proc_root=str(tmp_path)), store).collect()
    assert result.ok and status(result) == (1.0, "") and not result.devices


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
    store, config = await setup(tmp_path, kubelet, checkpoint=False)
    Path(config.device_checkpoint).write_text("{not json")
    result = PodProcessSource(config, store).collect()
    assert result.ok and ("ml", "trainer", "main") in samples_by_pod(result, "0")
