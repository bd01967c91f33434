"""Stand-in kubelet -> attribution sources -> snapshot -> /metrics over HTTP, in-process:
the daemon as ``exporter.wiring.daemon.build`` wires it on the simulated node, served on
loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from exporter import collectors
from exporter.sources.nvml_session import NvmlSession
from exporter.wiring.config import build as build_settings
from exporter.wiring.daemon import build
from testkit.kubelet import KubeletStandIn, pod

Series = list[tuple[str, dict[str, str], float]]
GiB = 1 << 30
# the simulated node's UUIDs; its GPU i runs pid 4100+i (GPU 0 runs nothing)
SIM_UUID = [f"GPU-5e1f0000-0000-4000-8000-{i:012d}" for i in range(4)]
UID_A, UID_B = "aaaaaaaa-0000-4000-8000-00000000000a", "bbbbbbbb-0000-4000-8000-00000000000b"


@asynccontextmanager
async def serving(flags: Mapping[str, object]) -> AsyncIterator[TestClient]:
    settings = build_settings(
        {"simulate": True, "simulate_gpus": 4, "node_name": "node-a", "interval": 0.2, **flags},
        {},
    )
    daemon = build(settings, NvmlSession.open_for(settings))
    client = TestClient(TestServer(daemon.app()))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def scrape(client: TestClient) -> Series:
    resp = await client.get("/metrics")
    assert resp.status == 200
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(await resp.text())
        for s in family.samples
    ]


async def scrape_until(client: TestClient, done: Callable[[Series], bool]) -> Series:
    deadline = time.monotonic() + 20
    while True:
        series = await scrape(client)
        if done(series):
            return series
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.1)


def find(series: Series, name: str, **match: str) -> list[tuple[dict[str, str], float]]:
    return [(lbl, v) for n, lbl, v in series if n == name and match.items() <= lbl.items()]


def available(series: Series, source: str) -> tuple[float, str] | None:
    found = find(series, "goodput_attribution_available", source=source)
    return (found[0][1], found[0][0]["reason"]) if found else None


async def test_pods_on_pod_info_and_per_pod_usage(
    tmp_path: Path, kubelet: tuple[KubeletStandIn, str]
) -> None:
    standin, path = kubelet
    standin.pods = [
        pod("ml", "trainer-0", {"main": [("nvidia.com/gpu", [SIM_UUID[1], SIM_UUID[2]])]}),
        # GPU 3 time-sliced between two pods
        pod("infer", "a", {"srv": [("nvidia.com/gpu.shared", [f"{SIM_UUID[3]}::1"])]}),
        pod("infer", "b", {"srv": [("nvidia.com/gpu.shared", [f"{SIM_UUID[3]}::2"])]}),
    ]
    (tmp_path / "4103").mkdir()  # the process on GPU 3 runs in pod a
    (tmp_path / "4103" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{UID_A}/{3:064x}\n")
    (tmp_path / "ckpt").write_text(
        '{"Data":{"PodDeviceEntries":['
        f'{{"PodUID":"{UID_A}","ContainerName":"srv","ResourceName":"nvidia.com/gpu.shared",'
        f'"DeviceIDs":{{"-1":["{SIM_UUID[3]}::1"]}}}},'
        f'{{"PodUID":"{UID_B}","ContainerName":"srv","ResourceName":"nvidia.com/gpu.shared",'
        f'"DeviceIDs":{{"-1":["{SIM_UUID[3]}::2"]}}}}]}},"Checksum":0}}'
    )
    flags = {
        "kubernetes": {
            "enabled": True,
            "kubelet_socket": path,
            "interval": 0.2,
            "process_interval": 0.2,
            "proc_root": str(tmp_path),
            "device_checkpoint": str(tmp_path / "ckpt"),
            "pod_label": "k8s_pod",
        }
    }
    async with serving(flags) as client:
        series = await scrape_until(
            client,
            lambda s: (
                available(s, "kubelet") == (1.0, "")
                and available(s, "cgroup") == (1.0, "")
                and bool(find(s, "goodput_gpu_pod_info"))
                # the cgroup source may poll before the kubelet's first answer: wait for a
                # poll that had the assignments
                and bool(find(s, "goodput_gpu_pod_memory_used_bytes", gpu="3", k8s_pod="a"))
            ),
        )
    info = sorted(
        (lbl["gpu"], lbl["namespace"], lbl["k8s_pod"], lbl["container"], lbl["job_name"], v)
        for lbl, v in find(series, "goodput_gpu_pod_info")
    )
    assert info == [
        ("1", "ml", "trainer-0", "main", "", 1.0),
        ("2", "ml", "trainer-0", "main", "", 1.0),
        # a shared GPU: one series per holder, never comma-joined values
        ("3", "infer", "a", "srv", "", 1.0),
        ("3", "infer", "b", "srv", "", 1.0),
    ]
    assert {lbl["node"] for lbl, _ in find(series, "goodput_gpu_pod_info")} == {"node-a"}
    # per-GPU series carry gpu and node only: pods are joined from goodput_gpu_pod_info
    for lbl, _ in find(series, "goodput_gpu_memory_used_bytes"):
        assert set(lbl) == {"gpu", "node"}
    [(usage, memory)] = find(series, "goodput_gpu_pod_memory_used_bytes", gpu="3")
    assert (usage["k8s_pod"], usage["container"], memory) == ("a", "srv", 74 * GiB)
    [(_, processes)] = find(series, "goodput_gpu_pod_processes", gpu="3", k8s_pod="a")
    assert processes == 1


async def test_missing_socket_leaves_gpu_metrics_flowing(tmp_path: Path) -> None:
    flags = {
        "kubernetes": {
            "enabled": True,
            "kubelet_socket": str(tmp_path / "missing.sock"),
            "proc_root": str(tmp_path),
        }
    }
    async with serving(flags) as client:
        # known at the first kubelet poll, not one interval (the default 10 s) later
        started = time.monotonic()
        series = await scrape_until(
            client, lambda s: available(s, "kubelet") == (0.0, "socket_missing")
        )
        assert time.monotonic() - started < 5
        series = await scrape_until(
            client, lambda s: len(find(s, "goodput_gpu_memory_used_bytes")) == 4
        )
    assert not find(series, "goodput_gpu_pod_info")


def test_disabled_adds_nothing() -> None:
    settings = build_settings({"node_name": "n"}, {})
    names = {c.name for c in collectors.enabled(settings)}
    assert not names & {"kubelet", "cgroup"}
    families = {
        f.name
        for g in collectors.families(collectors.enabled(settings), settings)
        for f in g.families
    }
    assert "goodput_gpu_pod_info" not in families
