"""The simulated node, end to end through the real NVML and GPM sources and the model.

The sim and the model share one fake clock advanced a second per step, so two simulated
minutes take well under a second of real time.
"""

from __future__ import annotations

import math

from exporter.model.source import ModelSource

from exporter.config import ModelConfig
from exporter.sim.fake_nvml import simulated_node
from exporter.sim.patterns import LOST_AFTER_SECONDS
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.nvml import NvmlSource
from exporter.sources.nvml_session import NvmlSession
from exporter.sources.profiling.gpm import GpmSource

# What an expert names each simulated workload (notes/names.md).
EXPECTED = {
    "0": "idle",
    "1": "allocated_idle",
    "2": "compute_bound",
    "3": "memory_bound",
    "4": "host_bound",
    "5": "launch_bound",
    "6": "compute_bound",
    "7": "compute_bound",
}
STEADY_AFTER = 4  # one window to seed GPM, then enter_windows (3)


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def run_node(seconds: int) -> list[SourceResult]:
    clock = Clock()
    session = NvmlSession(simulated_node(clock=clock), "simulated")
    session.open()
    # min_window=0: GPM windows are timed on the real clock, which barely moves here.
    sources = [NvmlSource(session), GpmSource(session, min_window=0.0)]
    store = SnapshotStore("sim")
    model = ModelSource(store, ModelConfig(), clock=clock)
    out = []
    try:
        for _ in range(seconds):
            clock.now += 1.0
            for source in sources:
                store.publish(source.collect())
            result = model.evaluate()
            store.publish(result)
            out.append(result)
    finally:
        session.close()
    return out


def regime(result: SourceResult, gpu: str) -> str:
    on = [
        dict(s.labels)["regime"]
        for s in result.devices[gpu]
        if s.name == "goodput_gpu_regime" and s.value == 1.0
    ]
    assert len(on) == 1, f"GPU {gpu} has {len(on)} regimes"
    return on[0]


def flag(result: SourceResult, gpu: str) -> bool:
    return any(
        s.value == 1.0 for s in result.devices[gpu] if s.name == "goodput_gpu_busy_unproductive"
    )


def test_each_pattern_gets_the_expert_regime() -> None:
    results = run_node(int(LOST_AFTER_SECONDS) + 10)
    for step, result in enumerate(results):
        for gpu in EXPECTED:
            got = regime(result, gpu)  # exactly one per GPU at every step
            if STEADY_AFTER <= step < LOST_AFTER_SECONDS - 2:
                assert got == EXPECTED[gpu], f"step {step} GPU {gpu}"
                assert flag(result, gpu) is (gpu == "5"), f"step {step} GPU {gpu}"
            for s in result.devices[gpu]:
                assert math.isfinite(s.value), (gpu, s)
    steady = results[STEADY_AFTER]
    assert len({regime(steady, g) for g in EXPECTED}) >= 5
    # GPU 7 falls off the bus: unknown, and nothing is called unproductive on it.
    last = results[-1]
    assert regime(last, "7") == "unknown" and not flag(last, "7")
    assert regime(last, "2") == "compute_bound"
    hollow = [
        s.value for s in last.devices["5"] if s.name == "goodput_gpu_hollow_utilization_ratio"
    ]
    assert hollow and hollow[0] > 0.8
