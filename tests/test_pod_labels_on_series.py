"""Pod labels live on goodput_gpu_pod_info by default; with labels_on_every_series they are
copied onto every per-GPU series, one copy per pod, and never comma-joined."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from exporter import collectors
from exporter.metrics.encode import Encoder
from exporter.readings import ContainerGpus, Device, GpuState, NvmlReading, PodAssignments
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.wiring.config import Settings

SHARED = PodAssignments((
    ContainerGpus("a", "p1", "c", "nvidia.com/gpu", ("GPU-0",), ("0",)),
    ContainerGpus("b", "p2", "c", "nvidia.com/gpu", ("GPU-0",), ("0",)),
))


def exposition(pod_labels: tuple[str, str, str] | None) -> list[tuple[str, dict[str, str]]]:
    store = SnapshotStore("n")
    devices = (Device("0", "GPU-0"), Device("1", "GPU-1"))
    states = {"0": GpuState(power_watts=300.0), "1": GpuState(power_watts=100.0)}
    store.publish(SourceResult(source="nvml", reading=NvmlReading(inventory=devices, gpus=states)))
    store.publish(SourceResult(source="kubelet", reading=SHARED))
    settings = Settings(simulate=True, kubernetes={"enabled": True})
    encoder = Encoder(collectors.families(collectors.REGISTRY, settings), pod_labels=pod_labels)
    text = encoder.encode(store.current).decode()
    return [(s.name, s.labels) for f in text_string_to_metric_families(text) for s in f.samples]


def test_default_keeps_pods_on_the_info_series_only() -> None:
    power = [labels for name, labels in exposition(None) if name == "goodput_gpu_power_watts"]
    assert sorted(p["gpu"] for p in power) == ["0", "1"]
    assert all("pod" not in p for p in power)


def test_copied_labels_give_one_series_per_pod() -> None:
    samples = exposition(("namespace", "pod", "container"))
    power = [labels for name, labels in samples if name == "goodput_gpu_power_watts"]
    on_shared = sorted((p["namespace"], p["pod"]) for p in power if p["gpu"] == "0")
    assert on_shared == [("a", "p1"), ("b", "p2")]
    assert [p for p in power if p["gpu"] == "1"] == [{"gpu": "1", "node": "n"}]  # no pod
    assert all("," not in v for _, labels in samples for v in labels.values())
    info = [labels for name, labels in samples if name == "goodput_gpu_pod_info"]
    assert len(info) == 2 and all(set(i) >= {"namespace", "pod", "container"} for i in info)
