"""One GPU, several holders (issue 50): NVML's per-process samples through the NVML source
and its fake, and what the model makes of them per pod or process: kernel-time shares,
apportioned SM activity, each holder's regime, tokens and energy, the cap on holders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pynvml
import pytest

from exporter.metrics.families import Family
from exporter.model.config import ModelConfig
from exporter.model.families import holder_families
from exporter.model.holders import OTHER, Unmixer
from exporter.model.node import NodeModel
from exporter.readings import (
    Device,
    GpuState,
    HolderVerdict,
    NodeVerdicts,
    NvmlReading,
    PodUsage,
    PodUsageReading,
    ProcessActivity,
    ProcessInfo,
    ProfilingReading,
    ProfilingStatus,
    ProfilingWindow,
    ServedModel,
    ServingState,
    TargetStatus,
)
from exporter.sim.fake_nvml import FakeMig
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.nvml import NvmlSource, aggregate
from exporter.sources.nvml_session import NvmlSession
from tests.conftest import ManualClock, make_node

GiB = 1 << 30
H200 = "NVIDIA H200"
CFG = ModelConfig()


# -- NVML source and the fake ----------------------------------------------------------------


def activity(source: NvmlSource, gpu: str = "0") -> tuple[ProcessActivity, ...] | None:
    result = source.poll_blocking()
    assert isinstance(result.reading, NvmlReading)
    return result.reading.gpus[gpu].process_activity


def shared_node(clock: ManualClock, loads: Mapping[int, tuple[float, float]]) -> NvmlSource:
    nvml = make_node(clock, ["compute_gemm"])
    gpu = nvml.gpus[0]
    gpu.processes = [(pid, 4 * GiB) for pid in loads]
    gpu.process_load = dict(loads)
    source = NvmlSource(NvmlSession(nvml, "test"), clock=clock)
    source.open()
    return source


def test_process_samples_are_read_per_window_from_the_newest_call(clock: ManualClock) -> None:
    source = shared_node(clock, {100: (0.6, 0.2), 200: (0.3, 0.0), 300: (0.0, 0.0)})
    assert activity(source) is None  # the first poll has no window, only a timestamp
    clock.advance(1.0)
    rows = {a.pid: a for a in activity(source) or ()}
    # one sample per driver period (1/6 s) for each process that ran; the idle one has none
    assert set(rows) == {100, 200}
    assert rows[100].samples == 6 and rows[100].kernel == pytest.approx(3.6)
    assert rows[100].memory == pytest.approx(1.2) and rows[100].kernel_mean == pytest.approx(0.6)
    assert rows[200].kernel == pytest.approx(1.8)
    nvml = source.session.nvml
    assert nvml.calls.get("nvmlDeviceGetProcessesUtilizationInfo", 0) >= 2
    assert "nvmlDeviceGetProcessUtilization" not in nvml.calls
    clock.advance(1.0)  # nothing is counted twice: the next window has its own six
    assert {a.pid: a.samples for a in activity(source) or ()} == {100: 6, 200: 6}


def test_no_process_ran_is_an_empty_window_not_an_error(clock: ManualClock) -> None:
    source = shared_node(clock, {100: (0.0, 0.0)})
    activity(source)
    clock.advance(1.0)
    assert activity(source) == ()  # NVML says NOT_FOUND: no samples since the timestamp


def test_zero_samples_answered_with_success_is_an_empty_window(clock: ManualClock) -> None:
    """nvidia-ml-py raises NVMLError(NVML_SUCCESS) when the driver's size query says 0."""
    source = shared_node(clock, {100: (0.4, 0.0)})
    activity(source)
    source.session.nvml.gpus[0].fail["nvmlDeviceGetProcessesUtilizationInfo"] = (
        pynvml.NVML_SUCCESS
    )
    clock.advance(1.0)
    assert activity(source) == ()


def test_a_process_that_exits_mid_window_keeps_what_it_ran(clock: ManualClock) -> None:
    source = shared_node(clock, {100: (0.5, 0.0), 200: (0.5, 0.0)})
    nvml = source.session.nvml
    activity(source)
    clock.advance(0.5)
    nvml.sample(0)  # the driver's samples up to the exit
    gpu = nvml.gpus[0]
    del gpu.process_load[200]
    gpu.processes = [(100, 4 * GiB)]
    clock.advance(0.5)
    rows = {a.pid: a.samples for a in activity(source) or ()}
    assert rows == {100: 6, 200: 3}
    clock.advance(1.0)
    assert {a.pid for a in activity(source) or ()} == {100}


def test_older_drivers_fall_back_to_process_utilization(clock: ManualClock) -> None:
    source = shared_node(clock, {100: (0.4, 0.0)})
    nvml = source.session.nvml
    nvml.gpus[0].fail["nvmlDeviceGetProcessesUtilizationInfo"] = (
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    )
    activity(source)
    clock.advance(1.0)
    [row] = activity(source) or ()
    assert (row.pid, row.samples) == (100, 6)
    # asked once (the library has no such call), then the older call on every poll
    assert nvml.calls["nvmlDeviceGetProcessesUtilizationInfo"] == 1
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] == 2


def test_unsupported_is_dropped_once_and_other_readings_go_on(clock: ManualClock) -> None:
    source = shared_node(clock, {100: (0.4, 0.0)})
    nvml = source.session.nvml
    nvml.gpus[0].unsupported |= {"nvmlDeviceGetProcessesUtilizationInfo",
                                 "nvmlDeviceGetProcessUtilization"}
    for _ in range(3):
        result = source.poll_blocking()
        clock.advance(1.0)
    assert isinstance(result.reading, NvmlReading)
    state = result.reading.gpus["0"]
    assert state.up and state.process_activity is None and state.utilization is not None
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] == 1  # asked once, then dropped


def test_a_failed_read_costs_that_window_only(clock: ManualClock) -> None:
    source = shared_node(clock, {100: (0.4, 0.0)})
    nvml = source.session.nvml
    activity(source)
    nvml.gpus[0].fail["nvmlDeviceGetProcessesUtilizationInfo"] = pynvml.NVML_ERROR_TIMEOUT
    clock.advance(1.0)
    assert activity(source) is None
    del nvml.gpus[0].fail["nvmlDeviceGetProcessesUtilizationInfo"]
    clock.advance(1.0)
    [row] = activity(source) or ()
    assert row.samples == 12  # the failed window's samples come with the next read


def test_mps_clients_are_listed_beside_the_compute_processes(clock: ManualClock) -> None:
    """Under MPS the clients have MPS compute contexts: listed, each once, as processes."""
    source = shared_node(clock, {100: (0.5, 0.0), 200: (0.4, 0.0)})
    nvml = source.session.nvml
    nvml.gpus[0].processes = [(100, 4 * GiB)]
    nvml.gpus[0].mps_processes = [(100, 4 * GiB), (200, 2 * GiB)]
    result = source.poll_blocking()
    assert isinstance(result.reading, NvmlReading)
    state = result.reading.gpus["0"]
    assert [(p.pid, p.used_memory_bytes) for p in state.processes] == [
        (100, 4 * GiB), (200, 2 * GiB)]
    assert state.process_count == 2
    nvml.gpus[0].unsupported.add("nvmlDeviceGetMPSComputeRunningProcesses")
    for _ in range(3):
        result = source.poll_blocking()
    assert isinstance(result.reading, NvmlReading)
    assert [p.pid for p in result.reading.gpus["0"].processes] == [100]
    assert nvml.calls["nvmlDeviceGetMPSComputeRunningProcesses"] == 2  # dropped after one


def test_mig_instances_are_whole_devices(clock: ManualClock) -> None:
    nvml = make_node(clock, ["compute_gemm"])
    nvml.gpus[0].mig = [FakeMig(1, 0, "MIG-a", 20 * GiB), FakeMig(2, 0, "MIG-b", 20 * GiB)]
    source = NvmlSource(NvmlSession(nvml, "test"), clock=clock)
    source.open()
    source.poll_blocking()
    clock.advance(1.0)
    result = source.poll_blocking()
    assert isinstance(result.reading, NvmlReading)
    assert result.reading.gpus["0-1"].process_activity is None
    assert result.reading.gpus["0-1"].up


def test_aggregate_counts_a_repeated_sample_once() -> None:
    s = pynvml.c_nvmlProcessUtilizationSample_t
    samples = [s(7, 10, 50, 10, 0, 0), s(7, 10, 50, 10, 0, 0), s(7, 11, 300, 0, 0, 0),
               s(8, 5, 90, 0, 0, 0)]
    [row] = aggregate(samples, after=5)
    assert (row.pid, row.samples) == (7, 2)
    assert row.kernel == pytest.approx(1.5)  # 300 % counts as 100 %


# -- the model, per holder -------------------------------------------------------------------

GEMM_FILL = 0.95
TINY_FILL = 0.03


@dataclass
class SharedGpu:
    """One H200 several holders share: publishes NVML (with per-process samples), GPM and,
    optionally, the cgroup source's pods and a serving engine, then steps the model."""

    cfg: ModelConfig = CFG
    store: SnapshotStore = field(default_factory=lambda: SnapshotStore("node-a"))
    model: NodeModel = field(init=False)
    now: float = 100.0
    seq: int = 0

    def __post_init__(self) -> None:
        self.model = NodeModel(self.cfg, clock=lambda: self.now)

    def step(
        self,
        loads: Mapping[int, tuple[float, float]],
        fills: Mapping[int, float],
        *,
        pods: Sequence[PodUsage] | None = None,
        memory: Mapping[int, int] | None = None,
        serving: ServingState | None = None,
        power: float = 400.0,
        mps: set[int] = frozenset(),  # type: ignore[assignment]
    ) -> NodeVerdicts:
        """One window: pid -> (kernel share it ran, memory), pid -> its SM fill. The GPU's
        kernel time is the sum (time-slicing), its SM active the sum of kernel x fill."""
        busy = min(sum(k for k, _ in loads.values()), 1.0)
        sm = sum(k * fills.get(pid, 0.0) for pid, (k, _) in loads.items())
        held = memory if memory is not None else dict.fromkeys(loads, 4 * GiB)
        samples = tuple(
            ProcessActivity(pid, 6, k * 6, m * 6) for pid, (k, m) in sorted(loads.items()) if k or m
        )
        state = GpuState(
            utilization=busy, power_watts=power, power_limit_watts=700.0,
            memory_used_bytes=float(sum(held.values())), memory_total_bytes=141e9,
            processes=tuple(ProcessInfo("0", pid, mem, mps_client=pid in mps)
                            for pid, mem in sorted(held.items())),
            process_count=len(held), process_activity=samples,
        )
        device = Device("0", "GPU-0", H200)
        self.store.publish(SourceResult("nvml", timestamp=self.now,
                                        reading=NvmlReading((device,), {"0": state})))
        self.seq += 1
        window = ProfilingWindow(1.0, graphics_active=busy, sm_active=sm,
                                 sm_occupancy=sm * 0.4, tensor_active=sm * 0.9,
                                 dram_active=0.3 * busy)
        self.store.publish(SourceResult("gpm", timestamp=self.now, reading=ProfilingReading(
            {"0": ProfilingStatus("gpm", True, window=window, sequence=self.seq)})))
        if pods is not None:
            self.store.publish(SourceResult("cgroup", reading=PodUsageReading(tuple(pods))))
        if serving is not None:
            self.store.publish(SourceResult("serving", timestamp=self.now, reading=serving))
        self.now += 1.0
        verdicts = self.model.step(self.store.current, 1.0)
        self.store.publish_verdicts(verdicts)
        return verdicts


def holders(v: NodeVerdicts, gpu: str = "0") -> dict[str, HolderVerdict]:
    """pid (or pod name) -> verdict."""
    return {h.pid or h.pod: h for h in v.holders.get(gpu, ())}


THREE = {1: (0.5, 0.4), 2: (0.5, 0.0), 3: (0.0, 0.0)}  # GEMM, tiny kernels, idle holder
FILLS = {1: GEMM_FILL, 2: TINY_FILL}


def test_three_processes_each_get_their_own_share_and_regime() -> None:
    gpu = SharedGpu()
    for _ in range(5):  # the tiny-kernel loop starts first: alone, its fill shows
        gpu.step({2: (1.0, 0.0), 3: (0.0, 0.0)}, FILLS)
    for _ in range(8):
        v = gpu.step(THREE, FILLS)
    h = holders(v)
    assert set(h) == {"1", "2", "3"}
    assert h["1"].kernel_ratio == pytest.approx(0.5) and h["2"].kernel_ratio == pytest.approx(0.5)
    assert h["3"].kernel_ratio == 0.0
    # SM activity unmixed: each near its own fill, and the holders sum to the GPU's
    assert h["1"].sm_active_ratio == pytest.approx(0.5 * GEMM_FILL, abs=0.02)
    assert h["2"].sm_active_ratio == pytest.approx(0.5 * TINY_FILL, abs=0.02)
    gpu_sm = 0.5 * GEMM_FILL + 0.5 * TINY_FILL
    assert sum(x.sm_active_ratio or 0.0 for x in h.values()) == pytest.approx(gpu_sm)
    assert h["1"].regime == "compute_bound" and not h["1"].busy_unproductive
    assert h["2"].regime == "launch_bound" and h["2"].hollow_busy  # named, not the GPU
    assert h["3"].regime == "allocated_idle" and not h["3"].busy_unproductive
    # the GPU as a whole: nothing changes for it
    assert v.gpus["0"].regime in ("compute_bound", "launch_bound", "host_bound")
    # energy with kernel time (400 W): the tiny loop had the GPU alone for 5 windows
    assert h["1"].energy_joules == pytest.approx(8 * 0.5 * 400.0)
    assert h["2"].energy_joules == pytest.approx((5 + 8 * 0.5) * 400.0)
    assert h["3"].energy_joules == 0.0  # the idle holder is charged nothing


def test_a_mix_that_never_changed_apportions_by_kernel_time() -> None:
    gpu = SharedGpu()
    for _ in range(8):
        v = gpu.step(THREE, FILLS)
    h = holders(v)
    pooled = (0.5 * GEMM_FILL + 0.5 * TINY_FILL) / 1.0
    # nothing told the two apart: each gets the GPU's fill (the estimate says so in the docs)
    assert h["1"].sm_active_ratio == pytest.approx(0.5 * pooled, abs=0.01)
    assert h["2"].sm_active_ratio == pytest.approx(0.5 * pooled, abs=0.01)


def test_unmixer_learns_from_bursts_without_any_solo_window() -> None:
    unmixer = Unmixer(half_life=300.0)
    a, b = ("", "", "", "a"), ("", "", "", "b")
    fills: dict[tuple[str, str, str, str], float] = {}
    for i in range(40):  # a bursting serving pod next to a steady one
        ka, kb = (0.3, 0.6) if i % 3 else (0.7, 0.3)
        fills = unmixer.fills({a: ka, b: kb}, ka * 0.2 + kb * 0.9, 1.0)
    assert fills[a] == pytest.approx(0.2, abs=0.03) and fills[b] == pytest.approx(0.9, abs=0.03)


def test_a_process_that_exits_leaves_with_its_series() -> None:
    gpu = SharedGpu()
    gpu.step(THREE, FILLS)
    v = gpu.step(THREE, FILLS)
    assert set(holders(v)) == {"1", "2", "3"}
    v = gpu.step({1: (1.0, 0.4), 3: (0.0, 0.0)}, FILLS, memory={1: 4 * GiB, 3: 4 * GiB})
    assert set(holders(v)) == {"1", "3"}
    assert holders(v)["1"].kernel_ratio == pytest.approx(1.0)
    v = gpu.step({1: (1.0, 0.4)}, FILLS, memory={1: 4 * GiB})
    assert v.holders == {}  # one holder: not shared, the GPU series say it all


def pods_of(pairs: Mapping[int, str]) -> list[PodUsage]:
    return [PodUsage("0", "infer", pod, "srv", 1, 4 * GiB, (pid,)) for pid, pod in pairs.items()]


def test_pid_reuse_goes_to_the_new_pod_never_the_old_ones_counters() -> None:
    gpu = SharedGpu()
    loads = {100: (0.6, 0.0), 200: (0.4, 0.0)}
    for _ in range(3):
        v = gpu.step(loads, {100: 0.9, 200: 0.9}, pods=pods_of({100: "a", 200: "b"}))
    before = holders(v)
    assert before["a"].kernel_seconds == pytest.approx(1.8)
    # pod a ended; its pid 100 is reused by a process of the new pod c
    for _ in range(2):
        v = gpu.step(loads, {100: 0.9, 200: 0.9}, pods=pods_of({100: "c", 200: "b"}))
    after = holders(v)
    assert set(after) == {"b", "c"}
    assert after["c"].kernel_seconds == pytest.approx(1.2)  # its own two windows only
    assert after["b"].kernel_seconds == pytest.approx(0.4 * 5)


def test_more_holders_than_the_cap_fold_into_other_and_are_counted() -> None:
    gpu = SharedGpu(cfg=ModelConfig(holders_max_per_gpu=4))
    loads = {100 + i: (0.1 * (1 + i % 3) / 2, 0.0) for i in range(10)}
    v = gpu.step(loads, dict.fromkeys(loads, 0.5))
    h = v.holders["0"]
    assert len(h) == 4 and OTHER in {x.key for x in h}
    assert v.errors["holders_over_cap"] == 7
    busy = min(sum(k for k, _ in loads.values()), 1.0)
    assert sum(x.kernel_ratio or 0.0 for x in h) == pytest.approx(busy)
    kept = sorted(x.kernel_ratio or 0.0 for x in h if x.key != OTHER)
    assert kept == pytest.approx([0.15] * 3)  # the busiest keep their own series


def test_cap_zero_turns_holders_off() -> None:
    gpu = SharedGpu(cfg=ModelConfig(holders_max_per_gpu=0))
    assert gpu.step(THREE, FILLS).holders == {}


def test_tokens_go_to_the_holder_whose_process_serves_them() -> None:
    gpu = SharedGpu()
    total = 0.0
    for _ in range(6):
        total += 300.0
        served = ServedModel("m", "llamacpp", tokens=(("generation", total),))
        serving = ServingState(
            gpus={"0": (served,)},
            targets=(TargetStatus("http://127.0.0.1:8080", True, "llamacpp", "m", gpus=("0",),
                                  via="process", pids=(1,)),),
        )
        v = gpu.step({1: (0.3, 0.1), 2: (0.7, 0.3)}, {1: 0.4, 2: 0.95}, serving=serving)
    h = holders(v)
    assert h["1"].tokens_per_second == pytest.approx(300.0)
    assert h["1"].tokens_per_kernel_second == pytest.approx(1000.0)
    assert h["2"].tokens_per_second is None  # the GEMM neighbour serves nothing


def test_series_carry_the_holder_and_nothing_is_copied_from_the_gpu() -> None:
    gpu = SharedGpu()
    for _ in range(5):
        gpu.step({2: (1.0, 0.0), 3: (0.0, 0.0)}, FILLS)
    for _ in range(4):
        v = gpu.step(THREE, FILLS)
    store_snap = gpu.store.current
    group = holder_families(pod="k8s_pod")
    readings = group.readings(store_snap)
    rows: dict[str, list[tuple[dict[str, str], float]]] = {}
    fam: Family[tuple[HolderVerdict, ...]]
    for fam in group.families:
        for labels, value in fam.rows(readings["0"]):
            rows.setdefault(fam.name, []).append((dict(zip(fam.labels, labels, strict=True)),
                                                  value))
    kernel = rows["goodput_gpu_holder_kernel_time_ratio"]
    assert {lbl["pid"] for lbl, _ in kernel} == {"1", "2", "3"}
    assert set(kernel[0][0]) == {"namespace", "k8s_pod", "container", "pid"}
    assert sorted(v for _, v in kernel) == pytest.approx([0.0, 0.5, 0.5])
    flagged = rows["goodput_gpu_holder_busy_unproductive"]
    assert [(lbl["pid"], lbl["reason"]) for lbl, _ in flagged] == [("2", "hollow_busy")]
    assert v.gpus["0"]  # the GPU's own verdict is still there


# -- the views: holders under their GPU ------------------------------------------------------

A = 'namespace="infer",pod="a",container="srv",pid=""'
B = 'namespace="infer",pod="b",container="srv",pid=""'
P = 'namespace="",pod="",container="",pid="4242"'
EXPOSITION = "\n".join([
    'goodput_gpu_info{gpu="0",node="n",name="NVIDIA H200",uuid="GPU-0"} 1',
    'goodput_gpu_info{gpu="1",node="n",name="NVIDIA H200",uuid="GPU-1"} 1',
    'goodput_gpu_up{gpu="0",node="n",reason=""} 1',
    'goodput_gpu_up{gpu="1",node="n",reason=""} 1',
    'goodput_gpu_regime{gpu="0",node="n",regime="compute_bound"} 1',
    'goodput_gpu_regime{gpu="1",node="n",regime="idle"} 1',
    'goodput_gpu_sm_active_ratio{gpu="0",node="n"} 0.49',
    f'goodput_gpu_holder_kernel_time_ratio{{gpu="0",node="n",{A}}} 0.5',
    f'goodput_gpu_holder_kernel_time_ratio{{gpu="0",node="n",{B}}} 0.49',
    f'goodput_gpu_holder_kernel_time_ratio{{gpu="0",node="n",{P}}} 0',
    f'goodput_gpu_holder_sm_active_ratio{{gpu="0",node="n",{A}}} 0.47',
    f'goodput_gpu_holder_sm_active_ratio{{gpu="0",node="n",{B}}} 0.02',
    f'goodput_gpu_holder_regime{{gpu="0",node="n",{A},regime="compute_bound"}} 1',
    f'goodput_gpu_holder_regime{{gpu="0",node="n",{B},regime="launch_bound"}} 1',
    f'goodput_gpu_holder_regime{{gpu="0",node="n",{P},regime="allocated_idle"}} 1',
    f'goodput_gpu_holder_busy_unproductive{{gpu="0",node="n",{B},reason="hollow_busy"}} 1',
    "",
])


def test_top_shows_the_holders_under_their_gpu() -> None:
    from exporter.view.rows import parse
    from exporter.view.table import frame

    view = parse(EXPOSITION)
    lines = frame(view, list(view.rows), 100)
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("0 "))
    assert "infer/a  share 0.50  SM 0.47  compute_bound" in lines[at + 1]
    assert "infer/b  share 0.49  SM 0.02  launch_bound  hollow busy" in lines[at + 2]
    assert "pid 4242  share 0.00" in lines[at + 3] and "allocated_idle" in lines[at + 3]
    assert lines[at + 4].lstrip().startswith("1 ")  # GPU 1 is nobody's to share
    assert all(len(line) <= 100 for line in lines)


def test_the_landing_page_shows_the_holders_under_their_gpu() -> None:
    from exporter.view.page import render
    from exporter.view.rows import parse

    view = parse(EXPOSITION)
    page = render(view, list(view.rows), "gpu", "")
    first = page.index("<td>0</td>")
    holders = [page.index(w) for w in ("infer/a: share 0.50", "infer/b: share 0.49",
                                       "pid 4242: share 0.00")]
    assert first < holders[0] < holders[1] < holders[2] < page.index("<td>1</td>")
    assert "hollow busy" in page and page.count('class="holder') == 3


def test_a_discovered_pods_tokens_go_to_that_pod_and_a_shared_model_to_nobody() -> None:
    from exporter.model.core import ModelRates
    from exporter.model.holders import HolderInput, owners

    a, b = HolderInput(("infer", "a", "srv", ""), (11,)), HolderInput(("infer", "b", "srv", ""),
                                                                      (12,))
    targets = (
        TargetStatus("infer/a:8080", True, "vllm", "llama", gpus=("0",), via="pod",
                     namespace="infer", pod="a"),
        TargetStatus("infer/b:8080", True, "vllm", "qwen", gpus=("0",), via="pod",
                     namespace="infer", pod="b"),
        TargetStatus("infer/c:8080", True, "vllm", "both", gpus=("0",), via="pod",
                     namespace="infer", pod="c"),
    )
    rows = [ModelRates("llama", 10.0, 8.0), ModelRates("qwen", 5.0, 4.0)]
    assert owners("0", rows, targets, [a, b]) == {"llama": a.holder, "qwen": b.holder}
    # two pods serving one model name on one GPU: its tokens are nobody's in particular
    twins = (targets[0], TargetStatus("infer/b:8080", True, "vllm", "llama", gpus=("0",),
                                      via="pod", namespace="infer", pod="b"))
    assert owners("0", rows[:1], twins, [a, b]) == {}


def test_mps_clients_whose_time_nvml_gives_the_server_are_unknown_not_idle() -> None:
    """Measured on an H200 (driver 580): under MPS every per-process sample names the MPS
    server; its clients are listed (nvmlDeviceGetMPSComputeRunningProcesses) with no sample."""
    gpu = SharedGpu()
    server, gemm, tiny = 900, 901, 902
    for _ in range(5):
        state_loads = {server: (1.0, 0.1), gemm: (0.0, 0.0), tiny: (0.0, 0.0)}
        v = gpu.step(state_loads, {server: 0.96}, mps={gemm, tiny})
    h = holders(v)
    assert h["900"].kernel_ratio == pytest.approx(1.0)
    for pid in ("901", "902"):
        assert h[pid].kernel_ratio is None and h[pid].sm_active_ratio is None
        assert h[pid].regime == "unknown" and not h[pid].busy_unproductive
        assert h[pid].memory_used_bytes == 4 * GiB


def test_a_small_holder_sampled_now_and_then_is_judged_on_its_average() -> None:
    """NVML samples each process about once a second: a server with a few % of a GPU next to
    a GEMM loop shows in one window's samples of three to seven (llama-server on an H200), is not
    called allocated_idle in the others."""
    gpu = SharedGpu()
    for i in range(14):
        small = 0.12 if i % 5 == 0 else 0.0
        v = gpu.step({1: (1.0 - small, 0.4), 2: (small, 0.05)}, {1: 0.95, 2: 0.3})
    h = holders(v)
    assert h["2"].kernel_ratio == 0.0  # this window's own figure is published as measured
    assert h["2"].regime != "allocated_idle"
