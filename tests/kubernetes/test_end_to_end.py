"""Stand-in kubelet -> attribution sources -> snapshot -> /metrics text."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import Settings
from exporter.metrics.render import SnapshotCollector
from exporter.snapshot import ProcessInfo, Sample, SnapshotStore, SourceResult
from exporter.sources import nvml
from exporter.sources.kubernetes import attribution_labels, build_sources
from exporter.sources.kubernetes.kubelet import KubeletSource
from exporter.sources.kubernetes.processes import PodProcessSource
from tests.kubernetes.conftest import INVENTORY, UUIDS
from tests.kubernetes.kubelet_standin import KubeletStandIn, pod

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def render(store: SnapshotStore, names: tuple[str, ...]) -> Series:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: store.current, names))
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def find(series: Series, name: str, **match: str) -> list[dict[str, str]]:
    return [
        dict(lbl)
        for (n, lbl), _ in series.items()
        if n == name and match.items() <= dict(lbl).items()
    ]


def gpu_source(store: SnapshotStore) -> None:
    store.publish(
        SourceResult(
            source="nvml",
            inventory=INVENTORY,
            devices={d.gpu: (Sample(nvml.MEMORY_USED, 1e9),) for d in INVENTORY},
            processes=(ProcessInfo("2", 11, 3 << 30), ProcessInfo("2", 12, 5 << 30)),
        )
    )


async def test_every_gpu_series_carries_its_pod(
    tmp_path: Path, kubelet: tuple[KubeletStandIn, str]
) -> None:
    standin, path = kubelet
    standin.pods = [
        pod("ml", "trainer-0", {"main": [("nvidia.com/gpu", [UUIDS[0], UUIDS[1]])]}),
        pod("infer", "a", {"srv": [("nvidia.com/gpu", [f"{UUIDS[2]}::1"])]}),
        pod("infer", "b", {"srv": [("nvidia.com/gpu", [f"{UUIDS[2]}::2"])]}),
    ]
    uid_a, uid_b = "aaaaaaaa-0000-4000-8000-00000000000a", "bbbbbbbb-0000-4000-8000-00000000000b"
    for pid, uid in ((11, uid_a), (12, uid_b)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(f"0::/kubepods/besteffort/pod{uid}/{pid:064x}")
    (tmp_path / "ckpt").write_text(
        '{"Data":{"PodDeviceEntries":['
        f'{{"PodUID":"{uid_a}","ContainerName":"srv","ResourceName":"nvidia.com/gpu",'
        f'"DeviceIDs":{{"-1":["{UUIDS[2]}::1"]}}}},'
        f'{{"PodUID":"{uid_b}","ContainerName":"srv","ResourceName":"nvidia.com/gpu",'
        f'"DeviceIDs":{{"-1":["{UUIDS[2]}::2"]}}}}]}},"Checksum":0}}'
    )
    settings = Settings.model_validate(
        {
            "node_name": "node-a",
            "kubernetes": {
                "enabled": True,
                "kubelet_socket": path,
                "proc_root": str(tmp_path),
                "device_checkpoint": str(tmp_path / "ckpt"),
                "pod_label": "k8s_pod",
            },
        }
    )
    store = SnapshotStore(settings.node_name)
    gpu_source(store)
    sources = build_sources(settings, store)
    assert [type(s) for s in sources] == [KubeletSource, PodProcessSource]
    for source in sources:
        store.publish(await source.poll())
    names = attribution_labels(settings)
    assert names == ("namespace", "k8s_pod", "container")
    series = render(store, names)

    [g0] = find(series, "goodput_gpu_memory_used_bytes", gpu="0")
    assert g0 == {
        "gpu": "0",
        "uuid": UUIDS[0],
        "node": "node-a",
        "namespace": "ml",
        "k8s_pod": "trainer-0",
        "container": "main",
    }
    [g2] = find(series, "goodput_gpu_memory_used_bytes", gpu="2")
    assert (g2["k8s_pod"], g2["namespace"]) == ("a,b", "infer,infer")
    [g3] = find(series, "goodput_gpu_memory_used_bytes", gpu="3")
    # unassigned: the same label names with empty values (Prometheus stores them as absent)
    assert (g3["namespace"], g3["k8s_pod"], g3["container"]) == ("", "", "")
    per_pod = {
        lbl["k8s_pod"]: series[("goodput_gpu_pod_memory_used_bytes", tuple(sorted(lbl.items())))]
        for lbl in find(series, "goodput_gpu_pod_memory_used_bytes", gpu="2")
    }
    assert per_pod == {"a": 3 << 30, "b": 5 << 30}
    assert find(series, "goodput_attribution_available", source="kubelet", reason="")
    assert find(series, "goodput_attribution_available", source="cgroup", reason="")
    for source in sources:
        await source.close()


async def test_missing_socket_leaves_gpu_metrics_flowing(tmp_path: Path) -> None:
    settings = Settings.model_validate(
        {
            "node_name": "n",
            "kubernetes": {
                "enabled": True,
                "kubelet_socket": str(tmp_path / "missing.sock"),
                "proc_root": str(tmp_path),
            },
        }
    )
    store = SnapshotStore("n")
    gpu_source(store)
    for source in build_sources(settings, store):
        store.publish(await source.poll())
    series = render(store, attribution_labels(settings))
    assert len(find(series, "goodput_gpu_memory_used_bytes")) == len(INVENTORY)
    [status] = find(series, "goodput_attribution_available", source="kubelet")
    assert status["reason"] == "socket_missing"
    assert series[("goodput_attribution_available", tuple(sorted(status.items())))] == 0


def test_disabled_adds_nothing() -> None:
    settings = Settings.model_validate({"node_name": "n"})
    assert attribution_labels(settings) == ()
    assert build_sources(settings, SnapshotStore("n")) == []
