"""The simulated node, end to end through the real NVML and GPM sources and the node model.

The sim and the model share one fake clock advanced a second per step, so two simulated
minutes take well under a second of real time. Every regime the model knows appears on one
of the simulated GPUs ([diagnosis]: a host-to-device stream, a sync-per-step loop and a rank
waiting in a collective included).
"""

from __future__ import annotations

import math

from exporter.model.config import ModelConfig
from exporter.model.node import NodeModel
from exporter.readings import NodeVerdicts
from exporter.sim.fake_nvml import simulated_node
from exporter.sim.patterns import LOST_AFTER_SECONDS, NODE
from exporter.snapshot import SnapshotStore
from exporter.sources.nvml import NvmlSource
from exporter.sources.nvml_session import NvmlSession
from exporter.sources.profiling.gpm import GpmSource

# What an expert names each simulated workload.
EXPECTED = {
    "idle": "idle",
    "allocated_idle": "allocated_idle",
    "compute_gemm": "compute_bound",
    "memory_decode": "memory_bound",
    "host_bound": "host_bound",
    "launch_bound": "launch_bound",
    "thermal_throttled": "compute_bound",
    "lost_later": "compute_bound",
    "transfer": "transfer_bound",
    "sync_loop": "host_bound",
    "collective_wait": "comm_wait",
    "pageable_transfer": "host_bound",
}
GPU = {w.name: str(i) for i, w in enumerate(NODE)}
HOLLOW = {"launch_bound"}  # the only workload flagged busy but unproductive
STEADY_AFTER = 4  # one window to seed GPM, then enter_windows (3)


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def run_node(seconds: int) -> list[NodeVerdicts]:
    clock = Clock()
    session = NvmlSession(simulated_node(clock=clock), "simulated")
    session.open()
    # min_window=0: GPM windows are timed on the real clock, which barely moves here.
    sources = [NvmlSource(session), GpmSource(session, min_window=0.0)]
    store = SnapshotStore("sim", profiling_order=("gpm",))
    model = NodeModel(ModelConfig(), clock=clock)
    out = []
    try:
        for _ in range(seconds):
            clock.now += 1.0
            for source in sources:
                store.publish(source.poll_blocking())
            verdicts = model.step(store.current, 1.0)
            store.publish_verdicts(verdicts)
            out.append(verdicts)
    finally:
        session.close()
    return out


def test_the_node_covers_every_workload_once() -> None:
    assert set(EXPECTED) == set(GPU)


def test_each_pattern_gets_the_expert_regime() -> None:
    results = run_node(int(LOST_AFTER_SECONDS) + 10)
    for step, verdicts in enumerate(results):
        for name, gpu in GPU.items():
            v = verdicts.gpus[gpu]
            if STEADY_AFTER <= step < LOST_AFTER_SECONDS - 2:
                assert v.regime == EXPECTED[name], f"step {step} {name} (GPU {gpu})"
                assert v.busy_unproductive is (name in HOLLOW), f"step {step} {name}"
            for number in (v.efficiency_score, v.hollow_utilization, v.mfu):
                assert number is None or math.isfinite(number), (gpu, v)
    steady = results[STEADY_AFTER]
    assert {v.regime for v in steady.gpus.values()} == set(EXPECTED.values())
    # The lost GPU: unknown, and nothing is called unproductive on it.
    last = results[-1]
    lost = last.gpus[GPU["lost_later"]]
    assert lost.regime == "unknown" and not lost.busy_unproductive
    assert last.gpus[GPU["compute_gemm"]].regime == "compute_bound"
    hollow = last.gpus[GPU["launch_bound"]].hollow_utilization
    assert hollow is not None and hollow > 0.8


def test_regime_seconds_count_every_window() -> None:
    results = run_node(20)
    seconds = dict(results[-1].gpus[GPU["transfer"]].regime_seconds)
    assert seconds["transfer_bound"] >= 18  # from the first window GPM could compute
    assert sum(seconds.values()) == 20
