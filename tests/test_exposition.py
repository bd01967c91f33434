"""The full exposition of the simulated node: required families, coherence, promtool."""

from __future__ import annotations

import math
import subprocess

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporter import collectors
from exporter.metrics.encode import Encoder
from exporter.metrics.self_metrics import SelfMetrics
from exporter.snapshot import SnapshotStore
from exporter.sources.nvml import NvmlSource
from exporter.sources.nvml_session import NvmlSession
from exporter.sources.profiling.gpm import GpmSource
from exporter.sources.xid import XidSource
from exporter.wiring.config import Settings
from tests.support.prometheus import require

REQUIRED = [
    "goodput_exporter_build_info",
    "goodput_gpu_info",
    "goodput_gpu_up",
    "goodput_gpu_utilization_ratio",
    "goodput_gpu_sm_active_ratio",
    "goodput_gpu_sm_occupancy_seconds_total",
    "goodput_gpu_tensor_active_ratio",
    "goodput_gpu_dram_active_ratio",
    "goodput_gpu_sm_active_seconds_total",
    "goodput_gpu_power_watts",
    "goodput_gpu_energy_joules_total",
    "goodput_gpu_memory_used_bytes",
    "goodput_gpu_memory_total_bytes",
    "goodput_gpu_temperature_celsius",
    "goodput_gpu_profiling_available",
]


def exposition(sim, clock, openmetrics: bool = False) -> bytes:
    session = NvmlSession(sim, "simulated")
    store = SnapshotStore("node-a")
    registry = CollectorRegistry(auto_describe=False)
    metrics = SelfMetrics(registry, "node-a")
    metrics.build_info.labels("node-a", "0.0.0", "simulated", "3").set(1)
    settings = Settings(simulate=True)
    encoder = Encoder(collectors.families(collectors.REGISTRY, settings), registry)
    sources = [
        NvmlSource(session, clock=clock),
        GpmSource(session, clock=clock),
        XidSource(session),
    ]
    for s in sources:
        s.open()
    for _ in range(3):
        for s in sources:
            store.publish(s.poll_blocking())
        clock.advance(1.0)
    sources[2].shutdown()
    return encoder.encode(store.current, openmetrics=openmetrics)


def samples(body: bytes) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_required_families_have_samples_for_every_gpu(sim, clock):
    found = samples(exposition(sim, clock))
    for name in REQUIRED:
        assert name in found, name
    for name in REQUIRED[1:]:
        gpus = {s.labels["gpu"] for s in found[name]}
        assert gpus == {str(i) for i in range(8)}, name
        assert all({"gpu", "node"} <= set(s.labels) for s in found[name])
        if name != "goodput_gpu_info":  # identity lives on the info series only
            assert all("uuid" not in s.labels for s in found[name]), name
    for rows in found.values():
        assert all(math.isfinite(s.value) for s in rows)


def test_utilization_lie_is_visible_on_the_hollow_gpu(sim, clock):
    found = samples(exposition(sim, clock))

    def get(name: str, gpu: str) -> float:
        return next(s.value for s in found[name] if s.labels.get("gpu") == gpu)

    assert get("goodput_gpu_utilization_ratio", "5") > 0.9
    assert get("goodput_gpu_sm_active_ratio", "5") < 0.1


def test_promtool_check_metrics_is_clean(sim, clock):
    body = exposition(sim, clock)
    proc = subprocess.run(
        [require("promtool"), "check", "metrics"], input=body, capture_output=True, check=False
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    assert proc.stdout.strip() == b"" and proc.stderr.strip() == b""


def test_every_published_family_is_declared(sim, clock):
    settings = Settings(simulate=True)
    declared = {
        fam.name
        for group in collectors.families(collectors.REGISTRY, settings)
        for fam in group.families
    }
    for family in text_string_to_metric_families(exposition(sim, clock).decode()):
        name = family.name if family.type != "counter" else family.name + "_total"
        if name.startswith("goodput_gpu"):
            assert name in declared, name


def test_openmetrics_parses_and_ends_with_eof(sim, clock):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om

    body = exposition(sim, clock, openmetrics=True).decode()
    assert body.endswith("# EOF\n")
    names = {family.name for family in om(body)}
    assert "goodput_gpu_sm_active_seconds" in names


def full_node_exposition(sim, clock, openmetrics: bool) -> str:
    """Every collector's families, optional ones included, over a snapshot that has model
    verdicts, a 3-GPU job and a served model: nothing any family can emit is left out."""
    from exporter.model.config import ModelConfig
    from exporter.model.node import NodeModel
    from exporter.readings import ServingState
    from exporter.snapshot import SourceResult
    from tests.support import typed

    session = NvmlSession(sim, "simulated")
    session.open()
    store = SnapshotStore("node-a", profiling_order=("gpm",))
    sources = [NvmlSource(session, clock=clock), GpmSource(session, min_window=0.0, clock=clock)]
    model = NodeModel(ModelConfig(), clock=clock)
    try:
        for i in range(1, 6):
            clock.advance(1.0)
            for s in sources:
                store.publish(s.poll_blocking())
            store.publish(SourceResult(source="kubelet", reading=typed.job("5", "6", "7")))
            served = {"2": (typed.served(100.0 * i, flops=1e13 * i),)}
            store.publish(
                SourceResult(source="serving", timestamp=clock(), reading=ServingState(served))
            )
            store.publish_verdicts(model.step(store.current, 1.0))
    finally:
        session.close()
    settings = Settings(simulate=True, kubernetes={"enabled": True})
    groups = collectors.families(collectors.REGISTRY, settings)
    encoder = Encoder(groups, CollectorRegistry(auto_describe=False), include_optional=True)
    return encoder.encode(store.current, openmetrics=openmetrics).decode()


def test_every_family_with_verdicts_parses_as_openmetrics_and_passes_promtool(sim, clock):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om

    body = full_node_exposition(sim, clock, openmetrics=True)
    names = {family.name for family in om(body)}
    for name in ("goodput_gpu_regime", "goodput_gpu_regime_seconds", "goodput_gpu_pod_info",
                 "goodput_gpu_mfu_ratio", "goodput_gpu_busy_unproductive"):
        assert name in names, name
    text = full_node_exposition(sim, clock, openmetrics=False)
    proc = subprocess.run(
        [require("promtool"), "check", "metrics"], input=text.encode(), capture_output=True,
        check=False,
    )
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), (
        proc.stdout.decode() + proc.stderr.decode()
    )
