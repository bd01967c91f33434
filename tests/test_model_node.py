"""The node model on hand-built typed snapshots: what it concludes, how it degrades, and the
verdicts that depend on several GPUs at once (a job's straggler and its waiting peers)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry

from exporter.metrics.encode import Encoder
from exporter.metrics.families import erase
from exporter.model import families as model_families
from exporter.model.config import ModelConfig
from exporter.model.node import NodeModel
from exporter.readings import (
    ContainerGpus,
    Device,
    GpuState,
    GpuVerdict,
    NodeVerdicts,
    NvmlReading,
    PodAssignments,
    PodJobs,
    ProfilingReading,
    ProfilingStatus,
    ProfilingWindow,
    ServedModel,
    ServingState,
)
from exporter.snapshot import SnapshotStore, SourceResult
from tests.support import typed

H100 = "NVIDIA H100 80GB HBM3"
CFG = ModelConfig(model_parameters={"llama-8b": 8e9})

GEMM = ProfilingWindow(1.0, graphics_active=1.0, sm_active=0.97, sm_occupancy=0.42,
                       tensor_active=0.86, dram_active=0.38)
TINY = ProfilingWindow(1.0, graphics_active=0.99, sm_active=0.04, sm_occupancy=0.01,
                       tensor_active=0.0, dram_active=0.02)
ZEROS = ProfilingWindow(1.0, graphics_active=0.0, sm_active=0.0, sm_occupancy=0.0,
                        tensor_active=0.0, dram_active=0.0)
# A 2-GPU all-reduce with one rank given 3x the compute (measured on an H200 pair).
WAITING = ProfilingWindow(1.0, graphics_active=0.98, sm_active=0.28, sm_occupancy=0.06,
                          tensor_active=0.13, dram_active=0.05,
                          nvlink_bytes_per_second=(("rx", 8e9), ("tx", 8e9)))
STRAGGLER = ProfilingWindow(1.0, graphics_active=0.98, sm_active=0.92, sm_occupancy=0.4,
                            tensor_active=0.89, dram_active=0.2,
                            nvlink_bytes_per_second=(("rx", 8e9), ("tx", 8e9)))
BALANCED = ProfilingWindow(1.0, graphics_active=0.99, sm_active=0.78, sm_occupancy=0.35,
                           tensor_active=0.7, dram_active=0.2,
                           nvlink_bytes_per_second=(("rx", 35e9), ("tx", 35e9)))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Node:
    """Publishes typed NVML, profiling and serving results the way the real sources do."""

    gpus: tuple[str, ...] = ("0",)
    devices: tuple[Device, ...] = ()
    pods: PodAssignments | None = None
    store: SnapshotStore = field(default_factory=lambda: SnapshotStore("node-a"))
    clock: Clock = field(default_factory=Clock)
    model: NodeModel = field(init=False)
    t: float = 0.0
    sequence: int = 0
    energy: float = 0.0
    tokens: float = 0.0
    flops: float = 0.0

    def __post_init__(self) -> None:
        self.model = NodeModel(CFG, clock=self.clock)
        if not self.devices:
            self.devices = tuple(Device(g, f"GPU-{g}", H100) for g in self.gpus)
        if self.pods is not None:
            self.store.publish(SourceResult(source="kubelet", reading=self.pods))

    def step(
        self,
        windows: Mapping[str, ProfilingWindow | None] | ProfilingWindow | None = GEMM,
        *,
        util: float | Mapping[str, float] = 1.0,
        power: float = 500.0,
        move: bool = True,
        tokens_per_second: float | None = None,
        flops_per_second: float | None = None,
        waiting: float = 0.0,
    ) -> NodeVerdicts:
        self.t += 1.0
        self.energy += power
        if not isinstance(windows, Mapping):
            windows = dict.fromkeys((d.gpu for d in self.devices), windows)
        utils = util if isinstance(util, Mapping) else {d.gpu: util for d in self.devices}
        states = {d.gpu: GpuState(utilization=utils[d.gpu], power_watts=power,
                                  power_limit_watts=700.0, energy_joules=self.energy,
                                  memory_used_bytes=70e9, memory_total_bytes=80e9,
                                  process_count=1)
                  for d in self.devices}
        self.store.publish(SourceResult(source="nvml", timestamp=self.t,
                                        reading=NvmlReading(self.devices, states)))
        if move:
            self.sequence += 1
        profiling = {
            gpu: ProfilingStatus("gpm", w is not None, "" if w else "unsupported", window=w,
                                 sequence=self.sequence)
            for gpu, w in windows.items()
        }
        self.store.publish(SourceResult(source="gpm", timestamp=self.t,
                                        reading=ProfilingReading(profiling)))
        if tokens_per_second is not None:
            self.tokens += tokens_per_second
            if flops_per_second is not None:
                self.flops += flops_per_second
            served = ServedModel(
                "llama-8b", "vllm",
                tokens=(("prompt", self.tokens * 0.25), ("generation", self.tokens * 0.75)),
                requests_running=8.0, requests_waiting=waiting,
                flops=self.flops if flops_per_second is not None else None,
            )
            self.store.publish(SourceResult(
                source="serving", timestamp=self.t,
                reading=ServingState(gpus={d.gpu: (served,) for d in self.devices})))
        self.clock.now += 1.0
        verdicts = self.model.step(self.store.current, 1.0)
        self.store.publish_verdicts(verdicts)
        return verdicts

    def run(self, n: int, *args: object, **kw: object) -> NodeVerdicts:
        for _ in range(n):
            out = self.step(*args, **kw)  # type: ignore[arg-type]
        return out


def one(v: NodeVerdicts, gpu: str = "0") -> GpuVerdict:
    return v.gpus[gpu]


def test_compute_bound_and_no_serving_gauges_without_serving() -> None:
    v = one(Node().run(4, GEMM))
    assert v.regime == "compute_bound" and not v.busy_unproductive
    assert not v.profiling_stale and (v.efficiency_score or 0) > 0.7
    assert v.mfu is None and v.joules_per_token is None and v.tokens_per_sm_second is None


def test_hollow_gpu_flagged_and_seconds_counted() -> None:
    node = Node()
    v = one(node.run(3, TINY))
    assert v.hollow_busy and v.regime == "launch_bound"
    assert v.hollow_utilization == pytest.approx(0.95)
    first = v.busy_unproductive_seconds
    assert one(node.run(2, TINY)).busy_unproductive_seconds == first + 2.0


def test_serving_rates_from_counters() -> None:
    v = one(Node().run(4, GEMM, power=600.0, tokens_per_second=2000.0))
    # 1500 generated tokens/s (kind=generation), 2000 tokens/s in all
    assert v.joules_per_token == pytest.approx(600.0 / 1500.0)
    assert v.tokens_per_sm_second == pytest.approx(1500.0 / 0.97)
    assert v.mfu == pytest.approx(2000.0 * 16e9 / 989.4e12)


def test_engine_flops_counter_preferred() -> None:
    v = one(Node().run(4, GEMM, tokens_per_second=2000.0, flops_per_second=98.94e12))
    assert v.mfu == pytest.approx(0.1)


def test_busy_no_output_and_no_joules_per_token_without_tokens() -> None:
    v = one(Node().run(5, GEMM, tokens_per_second=0.0))
    assert v.busy_no_output
    assert v.joules_per_token is None  # never infinite, never a stale value


def test_joules_per_token_does_not_outlive_the_load() -> None:
    node = Node()
    assert one(node.run(4, GEMM, tokens_per_second=2000.0)).joules_per_token is not None
    after = one(node.step(ZEROS, util=0.0, power=120.0, tokens_per_second=0.0))
    assert after.joules_per_token is None and after.tokens_per_sm_second is None


def test_silent_zeros_reported_as_stale_not_hollow() -> None:
    v = one(Node().run(5, ZEROS, util=0.98, power=520.0))
    assert v.profiling_stale and v.regime == "unknown"
    assert not v.busy_unproductive and v.hollow_utilization is None


def test_counters_that_stop_moving_go_stale() -> None:
    node = Node()
    node.run(4, TINY)
    assert not one(node.run(20, TINY, move=False)).profiling_stale  # 20 s < 30 s
    v = one(node.run(15, TINY, move=False))
    assert v.profiling_stale and v.regime == "unknown" and not v.hollow_busy


def test_profiling_unavailable_is_unknown() -> None:
    v = one(Node().run(4, None))
    assert v.regime == "unknown" and not v.profiling_stale and v.efficiency_score is None


def test_non_finite_input_is_an_error_not_a_nan() -> None:
    node = Node()
    node.run(3, GEMM)
    bad = GpuState(utilization=math.nan, power_watts=500.0)
    node.store.publish(SourceResult(source="nvml", reading=NvmlReading(node.devices, {"0": bad})))
    verdicts = node.model.step(node.store.current, 1.0)
    assert verdicts.errors["non_finite_input"] == 1
    v = one(verdicts)
    for number in (v.efficiency_score, v.hollow_utilization, v.mfu, v.joules_per_token):
        assert number is None or math.isfinite(number)


def test_exposition_renders_without_nan() -> None:
    node = Node()
    node.run(4, TINY, tokens_per_second=50.0)
    encoder = Encoder([erase(model_families.GPU), erase(model_families.NODE)],
                      CollectorRegistry(auto_describe=False))
    text = encoder.encode(node.store.current).decode()
    assert 'goodput_gpu_regime{gpu="0",node="node-a",regime="launch_bound"} 1' in text
    assert "goodput_gpu_busy_unproductive_seconds_total{" in text
    assert "NaN" not in text and "Inf" not in text


# verdicts that need the whole node -------------------------------------------------------------
def job(*gpus: str, pod: str = "train-0") -> PodAssignments:
    return PodAssignments((ContainerGpus("ml", pod, "main", "nvidia.com/gpu",
                                         tuple(f"GPU-{g}" for g in gpus), gpus),))


def test_waiting_rank_is_comm_wait_and_its_peer_the_straggler() -> None:
    """A verdict that depends on two GPUs' readings: the same window on GPU 0 means
    'waiting on GPU 1' only because GPU 1 of the same pod works hard."""
    node = Node(gpus=("0", "1"), pods=job("0", "1"))
    verdicts = node.run(12, {"0": WAITING, "1": STRAGGLER})
    assert verdicts.gpus["0"].regime == "comm_wait"
    assert verdicts.gpus["1"].regime == "compute_bound"
    assert not verdicts.gpus["0"].busy_unproductive  # waiting is not hollow work
    assert verdicts.gpus["0"].peers == ("1",) and verdicts.gpus["1"].peers == ("0",)
    (j,) = verdicts.jobs
    assert j.identity.key == ("kubernetes", "ml", "train-0")
    assert (j.gpus, j.straggler) == (("0", "1"), "1")


def test_balanced_all_reduce_has_no_straggler_and_no_flag() -> None:
    node = Node(gpus=("0", "1"), pods=job("0", "1"))
    verdicts = node.run(6, {"0": BALANCED, "1": BALANCED})
    assert [j.straggler for j in verdicts.jobs] == [""]
    assert not any(v.busy_unproductive for v in verdicts.gpus.values())
    assert {v.regime for v in verdicts.gpus.values()} == {"compute_bound"}


def test_gpus_of_different_pods_are_not_one_job() -> None:
    pods = PodAssignments(job("0", pod="a").containers + job("1", pod="b").containers)
    verdicts = Node(gpus=("0", "1"), pods=pods).run(4, {"0": TINY, "1": STRAGGLER})
    assert verdicts.jobs == ()
    assert verdicts.gpus["0"].regime == "launch_bound" and verdicts.gpus["0"].hollow_busy


def test_two_pods_of_one_job_are_one_job() -> None:
    """Pods whose labels name the same job (kubernetes.pod_labels) are judged together:
    the straggler is found across the two pods' GPUs, named by the job."""
    pods = PodAssignments(job("0", pod="train-0").containers + job("1", pod="train-1").containers)
    node = Node(gpus=("0", "1"), pods=pods)
    node.store.publish(SourceResult(source="pod_labels", reading=PodJobs(
        {("ml", "train-0"): "train", ("ml", "train-1"): "train"})))
    verdicts = node.run(12, {"0": WAITING, "1": STRAGGLER})
    (j,) = verdicts.jobs
    assert j.identity.key == ("kubernetes", "ml", "train")
    assert (j.gpus, j.straggler) == (("0", "1"), "1")
    assert verdicts.gpus["0"].regime == "comm_wait" and verdicts.gpus["0"].peers == ("1",)


def test_mig_slice_uses_its_own_peak() -> None:
    whole = Device("0", "GPU-0", H100)
    mig = Device("0-1", "MIG-1", f"{H100} MIG 1g.10gb", parent_uuid="GPU-0",
                 gpu_instance_id="1", compute_instance_id="0", mig_profile="1g.10gb")
    full = one(Node(devices=(whole,)).run(4, GEMM, tokens_per_second=2000.0)).mfu
    slice_ = one(Node(devices=(mig,)).run(4, GEMM, tokens_per_second=2000.0), "0-1").mfu
    assert full is not None and slice_ is not None
    assert slice_ == pytest.approx(full * 7)  # a 1g slice has 1/7 of the GPU's SMs


# the same checks on snapshots built with the typed builders -----------------------------------
def drive(
    model: NodeModel, clock: Clock, windows: Mapping[str, ProfilingWindow], pods: PodAssignments
) -> NodeVerdicts:
    """One poll of every source (typed results) and one model step, a second later."""
    clock.now += 1.0
    devices = [typed.device(g) for g in windows]
    seq = int(clock.now)
    published = typed.results(
        devices,
        windows={g: typed.profiling(w, sequence=seq) for g, w in windows.items()},
        pods=pods,
        timestamp=clock.now,
    )
    return model.step(typed.snapshot_with(*published), 1.0)


HOLLOW = typed.window(0.04, graphics=0.99, occupancy=0.01)  # no NVLink traffic of its own
BUSY = typed.window(0.92, graphics=0.98, occupancy=0.4, tensor=0.89)


def test_a_hollow_rank_is_waiting_only_because_its_peer_works() -> None:
    """GPU 0's window alone says launch_bound and hollow_busy; the same window next to a
    hard-working GPU of the same pod means it waits on that peer (the straggler)."""
    clock = Clock()
    alone = NodeModel(CFG, clock=clock)
    two_pods = PodAssignments(job("0", pod="a").containers + job("1", pod="b").containers)
    for _ in range(4):
        v = drive(alone, clock, {"0": HOLLOW, "1": BUSY}, two_pods)
    assert v.gpus["0"].regime == "launch_bound" and v.gpus["0"].hollow_busy
    assert v.jobs == ()

    clock = Clock()
    together = NodeModel(CFG, clock=clock)
    for _ in range(12):  # a straggler is named once it has held 10 s
        v = drive(together, clock, {"0": HOLLOW, "1": BUSY}, job("0", "1"))
    assert v.gpus["0"].regime == "comm_wait" and not v.gpus["0"].busy_unproductive
    assert v.gpus["1"].regime == "compute_bound"
    assert [(j.gpus, j.straggler) for j in v.jobs] == [(("0", "1"), "1")]


def test_regime_seconds_count_every_windows_undebounced_class() -> None:
    """Two launch-bound windows inside a compute-bound run do not move the debounced regime
    (enter_windows is 3) but are counted, second for second, in regime_seconds."""
    clock = Clock()
    model = NodeModel(CFG, clock=clock)
    pods = PodAssignments()
    for w in (BUSY, BUSY, BUSY, HOLLOW, HOLLOW, BUSY):
        v = drive(model, clock, {"0": w}, pods)
    verdict = v.gpus["0"]
    assert verdict.regime == "compute_bound" and verdict.window_regime == "compute_bound"
    seconds = dict(verdict.regime_seconds)
    assert seconds == {"compute_bound": 4.0, "launch_bound": 2.0}
    assert sum(seconds.values()) == 6.0


def test_an_implausible_mfu_is_counted_by_the_model_step() -> None:
    from prometheus_client import CollectorRegistry

    from exporter.metrics.self_metrics import SelfMetrics
    from exporter.model.step import ModelStep
    from exporter.readings import NodeVerdicts
    from exporter.snapshot import SnapshotStore, SourceResult

    class Model:
        def step(self, _snap: object, _interval: float) -> NodeVerdicts:
            return NodeVerdicts(errors={"mfu_implausible": 1})

    registry = CollectorRegistry()
    step = ModelStep(SnapshotStore("n"), Model(), 1.0, SelfMetrics(registry, "n"))  # type: ignore[arg-type]
    step(SourceResult(source="nvml"))
    labels = {"node": "n", "source": "model", "reason": "mfu_implausible"}
    assert registry.get_sample_value("goodput_exporter_source_errors_total", labels) == 1.0


# Bus-fed windows (issue 26): traffic above the floor is never idle; copy-engine time (NVML
# utilization minus GPM graphics activity) names transfer_bound or host_bound. The windows are
# the H100 readings of docs/validation/transfers-h100.md.
PCIE_PEAK = (("pcie", 63.0e9),)


def bus(rx: float, tx: float, graphics: float = 0.0, sm: float = 0.0) -> ProfilingWindow:
    return ProfilingWindow(1.0, graphics_active=graphics, sm_active=sm, sm_occupancy=sm / 4,
                           tensor_active=0.0, dram_active=0.0,
                           pcie_bytes_per_second=(("rx", rx), ("tx", tx)))


def bus_node() -> Node:
    return Node(devices=(Device("0", "GPU-0", H100, link_peaks=PCIE_PEAK),))


def test_notebook_with_a_tiny_kernel_every_few_seconds_stays_allocated_idle() -> None:
    node = bus_node()
    for i in range(15):
        kernel = i % 3 == 0  # one small cell every 3 s: a few ms of kernel, a 4-byte read
        v = one(node.step(bus(1.5e5 if kernel else 7e4, 4e5, graphics=0.004 if kernel else 0.0,
                              sm=0.001 if kernel else 0.0), util=0.0, power=75.0))
        if i >= 3:
            assert v.regime == "allocated_idle" and v.window_regime == "allocated_idle"
    assert dict(v.regime_seconds) == {"allocated_idle": 15.0}


@pytest.mark.parametrize("rate", [0.5e6, 5e6, 20e6])
def test_background_traffic_does_not_change_an_idle_verdict(rate: float) -> None:
    quiet = one(bus_node().run(6, bus(6e4, 3e5), util=0.0, power=75.0))
    chatty = one(bus_node().run(6, bus(rate, rate), util=0.0, power=75.0))
    assert quiet.regime == chatty.regime == "allocated_idle"
    assert not chatty.busy_unproductive and not chatty.profiling_stale


def test_pageable_copies_are_host_bound_not_allocated_idle() -> None:
    """A DataLoader without pin_memory: 8.2 GB/s, copy engines busy 16 % of the time."""
    v = one(bus_node().run(5, bus(8.24e9, 0.49e9), util=0.16, power=120.0))
    assert v.regime == "host_bound" and not v.busy_unproductive and not v.profiling_stale


def test_pinned_small_copies_are_transfer_bound_below_the_link_ratio() -> None:
    """64 KiB pinned copies: 10.5 GB/s (0.17 of the link), copy engines busy 55 %."""
    v = one(bus_node().run(5, bus(10.5e9, 0.64e9), util=0.55, power=120.0))
    assert v.regime == "transfer_bound" and not v.busy_unproductive


def test_a_throttled_trickle_above_the_floor_is_host_bound() -> None:
    v = one(bus_node().run(5, bus(108e6, 7e6), util=0.0, power=80.0))
    assert v.regime == "host_bound"


def test_small_pageable_copies_read_as_graphics_are_not_launch_bound_or_hollow() -> None:
    """64 KiB pageable copies: graphics 0.31 with SM 0 while PCIe moves 3.5 GB/s."""
    v = one(bus_node().run(5, bus(3.5e9, 0.21e9, graphics=0.31), util=0.31, power=120.0))
    assert v.regime == "host_bound" and not v.hollow_busy


def test_copies_with_idle_sms_at_high_power_are_not_silent_zeros() -> None:
    zeros_on_the_bus = bus(10.5e9, 0.64e9)  # every profiling ratio 0, the bus busy
    v = one(bus_node().run(5, zeros_on_the_bus, util=0.55, power=200.0))
    assert not v.profiling_stale and v.regime == "transfer_bound"


def test_the_model_steps_once_every_gpu_source_has_polled(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML polls first, the profiling backend a moment later: the model steps after both, so
    a window's utilization and profiling window come from the same second (issue 46: stepping
    after NVML alone paired this second's utilization with the previous profiling window).
    A source silent for two intervals is not waited for."""
    import time

    from exporter.model.step import ModelStep
    from exporter.readings import NodeVerdicts
    from exporter.snapshot import SnapshotStore, SourceResult

    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    stepped: list[float] = []

    class Model:
        def step(self, _snap: object, _interval: float) -> NodeVerdicts:
            stepped.append(now[0])
            return NodeVerdicts()

    step = ModelStep(SnapshotStore("n"), Model(), 1.0,  # type: ignore[arg-type]
                     triggers=("nvml", "gpm"))
    for second in range(3):
        now[0] = 100.0 + second
        step(SourceResult(source="nvml"))
        now[0] += 0.02
        step(SourceResult(source="gpm"))
        step(SourceResult(source="serving"))  # not a GPU poll: never a step
    assert stepped == pytest.approx([100.02, 101.02, 102.02])
    for second in range(3, 8):  # the profiling backend stops publishing
        now[0] = 100.0 + second
        step(SourceResult(source="nvml"))
    assert stepped[3:] == pytest.approx([105.0, 106.0, 107.0])
