"""ModelSource on a hand-built SnapshotStore: what it publishes and how it degrades."""

from __future__ import annotations

import math

import pytest
from exporter.metrics.catalog import load_all
from exporter.metrics.render import SnapshotCollector
from exporter.model.source import ModelSource, build_sources
from prometheus_client import CollectorRegistry, generate_latest

from exporter.config import ModelConfig, Settings
from exporter.model.core import REGIMES
from exporter.snapshot import Device, Sample, SnapshotStore, SourceResult, labels

H100 = "NVIDIA H100 80GB HBM3"
DEVICE = Device(gpu="0", uuid="GPU-0", name=H100)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Node:
    """Publishes NVML-, profiling- and serving-like results the way the real sources do."""

    def __init__(self, store: SnapshotStore) -> None:
        self.store = store
        self.t = 0.0
        self.energy = 0.0
        self.profiled = 0.0
        self.tokens = 0.0
        self.flops = 0.0

    def step(
        self,
        util: float = 1.0,
        power: float = 500.0,
        prof: dict[str, float] | None = None,
        profiling: bool = True,
        move_profiling: bool = True,
        tokens_per_second: float | None = None,
        flops_per_second: float | None = None,
        waiting: float = 0.0,
        extra: tuple[Sample, ...] = (),
    ) -> None:
        self.t += 1.0
        self.energy += power
        self.store.publish(
            SourceResult(
                source="nvml",
                timestamp=self.t,
                inventory=(DEVICE,),
                devices={
                    "0": (
                        Sample("goodput_gpu_utilization_ratio", util),
                        Sample("goodput_gpu_power_watts", power),
                        Sample("goodput_gpu_power_limit_watts", 700.0),
                        Sample("goodput_gpu_energy_joules_total", self.energy),
                        Sample("goodput_gpu_memory_used_bytes", 70e9),
                        Sample("goodput_gpu_memory_total_bytes", 80e9),
                        Sample("goodput_gpu_processes", 1.0),
                        *extra,
                    )
                },
            )
        )
        if profiling:
            if move_profiling:
                self.profiled += 1.0
            ratios = prof if prof is not None else {}
            samples = [
                Sample("goodput_gpu_profiling_available", 1.0, labels(source="gpm", reason="")),
                Sample("goodput_gpu_profiled_seconds_total", self.profiled),
            ]
            samples += [Sample(f"goodput_gpu_{k}_ratio", v) for k, v in ratios.items()]
        else:
            samples = [
                Sample(
                    "goodput_gpu_profiling_available",
                    0.0,
                    labels(source="gpm", reason="unsupported"),
                )
            ]
        self.store.publish(
            SourceResult(source="gpm", timestamp=self.t, devices={"0": tuple(samples)})
        )
        if tokens_per_second is not None:
            self.tokens += tokens_per_second
            model = labels(model="llama-8b", engine="vllm")
            serving = [
                Sample(
                    "goodput_gpu_tokens_total",
                    self.tokens * 0.25,
                    labels(kind="prompt", model="llama-8b", engine="vllm"),
                ),
                Sample(
                    "goodput_gpu_tokens_total",
                    self.tokens * 0.75,
                    labels(kind="generation", model="llama-8b", engine="vllm"),
                ),
                Sample(
                    "goodput_gpu_serving_requests",
                    waiting,
                    labels(state="waiting", model="llama-8b", engine="vllm"),
                ),
                Sample(
                    "goodput_gpu_serving_requests",
                    8.0,
                    labels(state="running", model="llama-8b", engine="vllm"),
                ),
            ]
            if flops_per_second is not None:
                self.flops += flops_per_second
                serving.append(Sample("goodput_gpu_serving_flops_total", self.flops, model))
            self.store.publish(
                SourceResult(source="serving", timestamp=self.t, devices={"0": tuple(serving)})
            )


GEMM = {
    "graphics_active": 1.0,
    "sm_active": 0.97,
    "sm_occupancy": 0.42,
    "tensor_active": 0.86,
    "dram_active": 0.38,
}
TINY = {
    "graphics_active": 0.99,
    "sm_active": 0.04,
    "sm_occupancy": 0.01,
    "tensor_active": 0.0,
    "dram_active": 0.02,
}
ZEROS = dict.fromkeys(GEMM, 0.0)


@pytest.fixture
def rig() -> tuple[Node, ModelSource, Clock]:
    store = SnapshotStore("node-a")
    clock = Clock()
    cfg = ModelConfig(model_parameters={"llama-8b": 8e9})
    return Node(store), ModelSource(store, cfg, interval=1.0, clock=clock), clock


def values(result: SourceResult, name: str) -> dict[str, float]:
    return {
        ",".join(v for _, v in s.labels): s.value for s in result.devices["0"] if s.name == name
    }


def tick(rig: tuple[Node, ModelSource, Clock], n: int = 1, **kw: object) -> SourceResult:
    node, model, clock = rig
    result = None
    for _ in range(n):
        node.step(**kw)  # type: ignore[arg-type]
        clock.now += 1.0
        result = model.evaluate()
        node.store.publish(result)
    assert result is not None
    return result


def test_regime_state_set_and_compute_bound(rig: tuple[Node, ModelSource, Clock]) -> None:
    r = tick(rig, 4, prof=GEMM)
    regimes = values(r, "goodput_gpu_regime")
    assert set(regimes) == set(REGIMES)
    assert sum(regimes.values()) == 1.0 and regimes["compute_bound"] == 1.0
    assert values(r, "goodput_gpu_busy_unproductive") == {"hollow_busy": 0.0, "busy_no_output": 0.0}
    assert values(r, "goodput_gpu_profiling_stale") == {"": 0.0}
    assert values(r, "goodput_gpu_efficiency_score_ratio")[""] > 0.7
    # no serving counters attributed: no serving-derived gauges at all
    for name in (
        "goodput_gpu_mfu_ratio",
        "goodput_gpu_joules_per_token",
        "goodput_gpu_tokens_per_sm_second",
    ):
        assert values(r, name) == {}


def test_hollow_gpu_flagged_and_seconds_counted(rig: tuple[Node, ModelSource, Clock]) -> None:
    r = tick(rig, 3, prof=TINY)
    assert values(r, "goodput_gpu_busy_unproductive")["hollow_busy"] == 1.0
    assert values(r, "goodput_gpu_regime")["launch_bound"] == 1.0
    assert values(r, "goodput_gpu_hollow_utilization_ratio")[""] == pytest.approx(0.95)
    first = values(r, "goodput_gpu_busy_unproductive_seconds_total")[""]
    r = tick(rig, 2, prof=TINY)
    assert values(r, "goodput_gpu_busy_unproductive_seconds_total")[""] == first + 2.0


def test_serving_rates_from_counters(rig: tuple[Node, ModelSource, Clock]) -> None:
    r = tick(rig, 4, prof=GEMM, power=600.0, tokens_per_second=2000.0)
    # 1500 generated tokens/s (kind=generation), 2000 tokens/s in all
    assert values(r, "goodput_gpu_joules_per_token")[""] == pytest.approx(600.0 / 1500.0)
    assert values(r, "goodput_gpu_tokens_per_sm_second")[""] == pytest.approx(1500.0 / 0.97)
    assert values(r, "goodput_gpu_mfu_ratio")[""] == pytest.approx(2000.0 * 16e9 / 989.4e12)


def test_engine_flops_counter_preferred(rig: tuple[Node, ModelSource, Clock]) -> None:
    r = tick(rig, 4, prof=GEMM, tokens_per_second=2000.0, flops_per_second=98.94e12)
    assert values(r, "goodput_gpu_mfu_ratio")[""] == pytest.approx(0.1)


def test_busy_no_output(rig: tuple[Node, ModelSource, Clock]) -> None:
    r = tick(rig, 5, prof=GEMM, tokens_per_second=0.0)
    assert values(r, "goodput_gpu_busy_unproductive")["busy_no_output"] == 1.0
    assert values(r, "goodput_gpu_efficiency_score_ratio")[""] == 0.0
    assert values(r, "goodput_gpu_joules_per_token") == {}  # never infinite


def test_silent_zeros_reported_as_stale_not_hollow(rig: tuple[Node, ModelSource, Clock]) -> None:
    r = tick(rig, 5, prof=ZEROS, util=0.98, power=520.0)
    assert values(r, "goodput_gpu_profiling_stale") == {"": 1.0}
    assert values(r, "goodput_gpu_regime")["unknown"] == 1.0
    assert set(values(r, "goodput_gpu_busy_unproductive").values()) == {0.0}
    assert values(r, "goodput_gpu_hollow_utilization_ratio") == {}


def test_counters_that_stop_moving_go_stale(rig: tuple[Node, ModelSource, Clock]) -> None:
    tick(rig, 4, prof=TINY)
    r = tick(rig, 20, prof=TINY, move_profiling=False)
    assert values(r, "goodput_gpu_profiling_stale") == {"": 0.0}  # 20 s < 30 s
    r = tick(rig, 15, prof=TINY, move_profiling=False)
    assert values(r, "goodput_gpu_profiling_stale") == {"": 1.0}
    assert values(r, "goodput_gpu_regime")["unknown"] == 1.0
    assert values(r, "goodput_gpu_busy_unproductive")["hollow_busy"] == 0.0


def test_profiling_unavailable(rig: tuple[Node, ModelSource, Clock]) -> None:
    r = tick(rig, 4, profiling=False)
    assert values(r, "goodput_gpu_regime")["unknown"] == 1.0
    assert values(r, "goodput_gpu_profiling_stale") == {"": 0.0}
    assert values(r, "goodput_gpu_efficiency_score_ratio") == {}


def test_non_finite_input_is_an_error_not_a_nan(rig: tuple[Node, ModelSource, Clock]) -> None:
    bad = (Sample("goodput_gpu_utilization_ratio", math.nan),)
    r = tick(rig, 4, prof=GEMM, extra=bad)
    assert r.errors["non_finite_input"] == 1
    assert all(math.isfinite(s.value) for s in r.devices["0"])


def test_exposition_renders_without_nan(rig: tuple[Node, ModelSource, Clock]) -> None:
    load_all()
    tick(rig, 4, prof=TINY, tokens_per_second=50.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: rig[0].store.current))
    text = generate_latest(registry).decode()
    assert 'node="node-a",regime="launch_bound",uuid="GPU-0"} 1.0' in text
    assert "goodput_gpu_busy_unproductive_seconds_total{" in text
    assert "NaN" not in text and "Inf" not in text


def test_build_sources_uses_model_interval() -> None:
    store = SnapshotStore("n")
    (src,) = build_sources(Settings(interval=2.0), store)
    assert isinstance(src, ModelSource) and src.interval == 2.0
    (src,) = build_sources(Settings(interval=2.0, model={"interval": 5.0}), store)
    assert src.interval == 5.0


async def test_poll_is_async_and_empty_without_inventory() -> None:
    src = ModelSource(SnapshotStore("n"), ModelConfig())
    result = await src.poll()
    assert result.ok and result.devices == {}
