"""Three pods time-slicing one GPU (the device plugin's replica ids ``<uuid>::<n>``), end to
end: the kubelet stand-in, the cgroup source naming each pid's pod, the fake NVML's
per-process samples, the model and /metrics. Each pod gets its own share, never a copy of
the device's value (issue 50)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from exporter.sim.fake_nvml import simulated_node
from exporter.sources.nvml_session import NvmlSession
from exporter.wiring.config import build as build_settings
from exporter.wiring.daemon import build
from testkit.kubelet import KubeletStandIn, pod
from tests.kubernetes.test_end_to_end import SIM_UUID, Series, find, scrape

GiB = 1 << 30
UIDS = {
    "a": "aaaaaaaa-0000-4000-8000-00000000000a",
    "b": "bbbbbbbb-0000-4000-8000-00000000000b",
    "c": "cccccccc-0000-4000-8000-00000000000c",
}
PIDS = {"a": 4201, "b": 4202, "c": 4203}


def holder_values(series: Series, name: str) -> dict[str, float]:
    return {lbl["k8s_pod"]: v for lbl, v in find(series, name, gpu="2")}


async def test_each_time_sliced_pod_gets_its_own_share(
    tmp_path: Path, kubelet: tuple[KubeletStandIn, str]
) -> None:
    standin, path = kubelet
    # GPU 2 (large GEMMs on the simulated node) handed to three pods as replicas 1..3
    standin.pods = [
        pod("infer", name, {"srv": [("nvidia.com/gpu.shared", [f"{SIM_UUID[2]}::{n}"])]})
        for n, name in enumerate(("a", "b", "c"), start=1)
    ]
    entries = []
    for n, name in enumerate(("a", "b", "c"), start=1):
        pid = PIDS[name]
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(
            f"0::/kubepods/besteffort/pod{UIDS[name]}/{pid:064x}\n"
        )
        entries.append(
            f'{{"PodUID":"{UIDS[name]}","ContainerName":"srv",'
            f'"ResourceName":"nvidia.com/gpu.shared","DeviceIDs":{{"-1":["{SIM_UUID[2]}::{n}"]}}}}'
        )
    (tmp_path / "ckpt").write_text(
        '{"Data":{"PodDeviceEntries":[' + ",".join(entries) + ']},"Checksum":0}'
    )
    settings = build_settings(
        {
            "simulate": True,
            "simulate_gpus": 4,
            "node_name": "node-a",
            "interval": 0.2,
            "kubernetes": {
                "enabled": True,
                "kubelet_socket": path,
                "interval": 0.2,
                "process_interval": 0.2,
                "proc_root": str(tmp_path),
                "device_checkpoint": str(tmp_path / "ckpt"),
                "pod_label": "k8s_pod",
            },
        },
        {},
    )
    nvml = simulated_node(gpus=4)
    shared = nvml.gpus[2]
    shared.processes = [(PIDS["a"], 20 * GiB), (PIDS["b"], 10 * GiB), (PIDS["c"], 30 * GiB)]
    # a runs twice the kernel time b does; c holds memory and idles
    shared.process_load = {PIDS["a"]: (0.6, 0.3), PIDS["b"]: (0.3, 0.0)}
    session = NvmlSession(nvml, "simulated")
    session.open()
    daemon = build(settings, session)
    client = TestClient(TestServer(daemon.app()))
    await client.start_server()
    try:
        deadline = time.monotonic() + 20
        while True:
            series = await scrape(client)
            kernel = holder_values(series, "goodput_gpu_holder_kernel_time_ratio")
            if set(kernel) == {"a", "b", "c"} and kernel["b"] > 0:
                break
            assert time.monotonic() < deadline, f"no holder series: {kernel}"
            await asyncio.sleep(0.1)
    finally:
        await client.close()
    labels = [lbl for lbl, _ in find(series, "goodput_gpu_holder_kernel_time_ratio")]
    assert {(lbl["namespace"], lbl["container"], lbl["pid"]) for lbl in labels} == {
        ("infer", "srv", "")
    }
    assert {lbl["gpu"] for lbl in labels} == {"2"}  # the GPUs nobody shares have none
    # each pod its own share: a twice b, c nothing, never the device's value copied
    assert kernel["a"] == 2 * kernel["b"] or abs(kernel["a"] - 2 * kernel["b"]) < 0.05
    assert kernel["c"] == 0.0
    assert kernel["a"] != kernel["b"]
    memory = holder_values(series, "goodput_gpu_holder_memory_used_bytes")
    assert memory == {"a": 20 * GiB, "b": 10 * GiB, "c": 30 * GiB}
    regimes = {lbl["k8s_pod"]: lbl["regime"] for lbl, _ in
               find(series, "goodput_gpu_holder_regime", gpu="2")}
    assert regimes["c"] in ("allocated_idle", "unknown")  # debounced: it starts unknown
    # the GPU-level series are unchanged: one per GPU, no pod labels
    [(gpu_labels, _)] = find(series, "goodput_gpu_utilization_ratio", gpu="2")
    assert set(gpu_labels) == {"gpu", "node"}
