"""Table tests of the pure efficiency model: one window in, one verdict out."""

from __future__ import annotations

import pytest

from exporter.model.config import ModelConfig
from exporter.model.core import (
    ALLOCATED_IDLE,
    COMM_WAIT,
    COMPUTE_BOUND,
    HOST_BOUND,
    IDLE,
    LAUNCH_BOUND,
    MEMORY_BOUND,
    TRANSFER_BOUND,
    UNKNOWN,
    GpuModel,
    ModelRates,
    Window,
    assess,
)
from tests.support.typed import evaluate

CFG = ModelConfig(model_parameters={"llama-8b": 8e9})
H100 = "NVIDIA H100 80GB HBM3"
GIB = 1024.0**3


def prof(**kw: object) -> Window:
    """A window with profiling available and fresh."""
    base: dict[str, object] = {
        "profiling_available": True,
        "profiling_age_seconds": 0.0,
        "gpu_name": H100,
        "power_limit_watts": 700.0,
    }
    base.update(kw)
    return Window(**base)  # type: ignore[arg-type]


# (case, window, expected regime, hollow_busy)
CASES = [
    (
        "idle, nothing held",
        prof(
            util=0.0,
            graphics_active=0.0,
            sm_active=0.0,
            processes=0,
            memory_used_bytes=0.5 * GIB,
            memory_total_bytes=80 * GIB,
        ),
        IDLE,
        False,
    ),
    (
        "allocated idle: a process",
        prof(util=0.0, graphics_active=0.0, sm_active=0.0, processes=1),
        ALLOCATED_IDLE,
        False,
    ),
    (
        "allocated idle: memory only",
        prof(
            util=0.01,
            sm_active=0.0,
            processes=0,
            memory_used_bytes=60 * GIB,
            memory_total_bytes=80 * GIB,
        ),
        ALLOCATED_IDLE,
        False,
    ),
    (
        "large GEMMs",
        prof(
            util=1.0,
            graphics_active=1.0,
            sm_active=0.97,
            sm_occupancy=0.42,
            tensor_active=0.86,
            dram_active=0.38,
        ),
        COMPUTE_BOUND,
        False,
    ),
    (
        "fp32 SIMT kernels",
        prof(util=1.0, sm_active=0.95, tensor_active=0.0, fp_active=0.7, dram_active=0.2),
        COMPUTE_BOUND,
        False,
    ),
    (
        "decode",
        prof(
            util=0.96,
            graphics_active=0.96,
            sm_active=0.74,
            sm_occupancy=0.28,
            tensor_active=0.14,
            dram_active=0.83,
        ),
        MEMORY_BOUND,
        False,
    ),
    (
        "HBM copy (reference: util 100%, DRAM 88.7%) even with few SMs",
        prof(util=1.0, sm_active=0.2, tensor_active=0.0, dram_active=0.887),
        MEMORY_BOUND,
        False,
    ),
    (
        "host gaps (reference: util 31%)",
        prof(util=0.31, sm_active=0.28, tensor_active=0.25, dram_active=0.1),
        HOST_BOUND,
        False,
    ),
    (
        "sync bursts, NVML caught a burst: graphics_active decides",
        prof(util=1.0, graphics_active=0.35, sm_active=0.30, tensor_active=0.15, dram_active=0.1),
        HOST_BOUND,
        False,
    ),
    (
        "tiny kernels (sim GPU 5)",
        prof(util=0.99, graphics_active=0.99, sm_active=0.04, tensor_active=0.0, dram_active=0.02),
        LAUNCH_BOUND,
        True,
    ),
    (
        "tiny kernels (reference: util 37%, SM 0.05%)",
        prof(
            util=0.37, graphics_active=0.371, sm_active=0.0005, tensor_active=0.0, dram_active=0.0
        ),
        LAUNCH_BOUND,
        True,
    ),
    (
        "host-to-device stream (measured H200: util 1.00, SM 0.00, PCIe rx 58.7 GB/s)",
        prof(
            util=1.0,
            graphics_active=0.0,
            sm_active=0.0,
            processes=1,
            link_use=(("pcie", 58.7e9 / 63.0e9),),
        ),
        TRANSFER_BOUND,
        False,
    ),
    (
        "the same copy at a trickle: not transfer-bound, nothing runs",
        prof(util=0.3, graphics_active=0.0, sm_active=0.0, processes=1, link_use=(("pcie", 0.05),)),
        ALLOCATED_IDLE,
        False,
    ),
    (
        "GEMMs while the link is busy: compute wins over transfer",
        prof(
            util=1.0,
            graphics_active=1.0,
            sm_active=0.95,
            tensor_active=0.8,
            link_use=(("pcie", 0.9),),
        ),
        COMPUTE_BOUND,
        False,
    ),
    (
        "sync per small step (measured H200: util 0.085, SM 0.023): host, not idle",
        prof(util=0.085, graphics_active=0.085, sm_active=0.023, processes=1),
        HOST_BOUND,
        False,
    ),
    (
        "rank waiting in a collective (measured: SM 0.28, NVLink 8 GB/s each way)",
        prof(
            util=0.98,
            graphics_active=0.98,
            sm_active=0.28,
            sm_occupancy=0.06,
            tensor_active=0.13,
            dram_active=0.05,
            nvlink_bytes_per_second=16e9,
        ),
        COMM_WAIT,
        False,
    ),
    (
        "skinny GEMMs at moderate kernel time: launch, not hollow",
        prof(util=0.2, sm_active=0.03, tensor_active=0.02, dram_active=0.01),
        LAUNCH_BOUND,
        False,
    ),
    (
        "queued work, GPU at 85%: host_bound",
        prof(
            util=0.85,
            sm_active=0.8,
            tensor_active=0.3,
            dram_active=0.3,
            serving=(ModelRates("llama-8b", 100.0, 80.0, requests_waiting=12),),
        ),
        HOST_BOUND,
        False,
    ),
    (
        "85% without a queue: nearest wall",
        prof(util=0.85, sm_active=0.8, tensor_active=0.3, dram_active=0.3),
        COMPUTE_BOUND,
        False,
    ),
    ("profiling unavailable, busy", Window(util=1.0, gpu_name=H100), UNKNOWN, False),
    ("profiling unavailable, idle", Window(util=0.0, processes=0), IDLE, False),
    (
        "profiling stale",
        prof(
            util=1.0,
            sm_active=0.04,
            tensor_active=0.0,
            dram_active=0.0,
            profiling_age_seconds=120.0,
        ),
        UNKNOWN,
        False,
    ),
    (
        "silent zeros",
        prof(
            util=0.98,
            graphics_active=0.0,
            sm_active=0.0,
            sm_occupancy=0.0,
            tensor_active=0.0,
            dram_active=0.0,
            power_watts=520.0,
        ),
        UNKNOWN,
        False,
    ),
    ("GPU lost: no utilization", prof(), UNKNOWN, False),
    ("only SM active known, busy and full", prof(util=1.0, sm_active=0.9), UNKNOWN, False),
]


@pytest.mark.parametrize(
    ("window", "regime", "hollow"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_regime_table(window: Window, regime: str, hollow: bool) -> None:
    a = assess(window, CFG)
    assert a.regime == regime
    assert a.hollow_busy is hollow


def test_unknown_means_nothing_unproductive_and_no_score() -> None:
    a = assess(
        prof(util=0.98, sm_active=0.0, tensor_active=0.0, dram_active=0.0, power_watts=520.0), CFG
    )
    assert a.silent_zeros and a.profiling_stale
    assert not a.hollow_busy and not a.busy_no_output
    assert a.efficiency_score is None and a.hollow_utilization is None


def test_silent_zeros_need_high_power() -> None:
    cool = prof(util=0.98, sm_active=0.0, tensor_active=0.0, dram_active=0.0, power_watts=80.0)
    a = assess(cool, CFG)
    assert not a.silent_zeros and not a.profiling_stale
    assert a.regime == LAUNCH_BOUND  # believed: it is what the counters say


def test_unavailable_is_not_stale() -> None:
    a = assess(Window(util=1.0, profiling_available=False, profiling_age_seconds=999.0), CFG)
    assert not a.profiling_stale and a.regime == UNKNOWN


def test_busy_no_output() -> None:
    stuck = prof(
        util=0.97,
        graphics_active=0.97,
        sm_active=0.95,
        tensor_active=0.6,
        dram_active=0.3,
        serving=(ModelRates("llama-8b", 0.0, 0.0, requests_running=4),),
    )
    a = assess(stuck, CFG)
    assert a.busy_no_output and not a.hollow_busy
    assert a.efficiency_score == 0.0
    assert a.joules_per_token is None  # no tokens: undefined, not infinite
    healthy = prof(
        util=0.97,
        sm_active=0.95,
        tensor_active=0.6,
        dram_active=0.3,
        serving=(ModelRates("llama-8b", 900.0, 400.0, requests_running=4),),
    )
    assert not assess(healthy, CFG).busy_no_output


def test_busy_no_output_respects_profiling_switch() -> None:
    w = Window(util=0.97, serving=(ModelRates("m", 0.0, 0.0),))
    assert not assess(w, CFG).busy_no_output
    relaxed = CFG.model_copy(update={"no_output_needs_profiling": False})
    assert assess(w, relaxed).busy_no_output


def test_serving_gauges_and_mfu_from_parameters() -> None:
    w = prof(
        util=0.95,
        sm_active=0.8,
        tensor_active=0.2,
        dram_active=0.7,
        power_watts=600.0,
        serving=(ModelRates("llama-8b", 2000.0, 1500.0, requests_running=30),),
    )
    a = assess(w, CFG)
    assert a.tokens_per_sm_second == pytest.approx(1500.0 / 0.8)
    assert a.joules_per_token == pytest.approx(600.0 / 1500.0)
    assert a.mfu == pytest.approx(2000.0 * 2 * 8e9 / 989.4e12)


def test_mfu_prefers_engine_flops_and_needs_known_models() -> None:
    engine = prof(
        util=1.0,
        sm_active=0.9,
        tensor_active=0.5,
        dram_active=0.5,
        serving=(ModelRates("unknown-model", 100.0, 50.0, flops_per_second=494.7e12),),
    )
    assert assess(engine, CFG).mfu == pytest.approx(0.5)
    unknown = prof(util=1.0, sm_active=0.9, serving=(ModelRates("unknown-model", 100.0, 50.0),))
    assert assess(unknown, CFG).mfu is None
    silent_unknown = prof(
        util=1.0,
        sm_active=0.9,
        serving=(ModelRates("llama-8b", 100.0, 50.0), ModelRates("unknown-model", 0.0, 0.0)),
    )
    assert assess(silent_unknown, CFG).mfu == pytest.approx(100.0 * 16e9 / 989.4e12)


def test_mfu_above_peak_is_absent_and_flagged_never_clipped() -> None:
    w = prof(util=1.0, sm_active=0.9, serving=(ModelRates("llama-8b", 1e6, 1e6),))
    a = assess(w, CFG)
    assert a.mfu is None and a.mfu_above_peak


def test_mfu_per_model_dtype_and_override() -> None:
    cfg = CFG.model_copy(
        update={"model_dtypes": {"llama-8b": "fp8"}, "peak_flops": {"H100": {"fp8": 2e15}}}
    )
    w = prof(util=1.0, sm_active=0.9, serving=(ModelRates("llama-8b", 1000.0, 1000.0),))
    assert assess(w, cfg).mfu == pytest.approx(1000.0 * 16e9 / 2e15)


# hysteresis -----------------------------------------------------------------------------------
GEMM = prof(util=1.0, graphics_active=1.0, sm_active=0.97, tensor_active=0.86, dram_active=0.38)
DECODE = prof(util=0.96, sm_active=0.74, tensor_active=0.14, dram_active=0.83)
TINY = prof(util=0.99, sm_active=0.04, tensor_active=0.0, dram_active=0.02)
BROKEN = Window(util=1.0)
IDLE_W = prof(util=0.0, graphics_active=0.0, sm_active=0.0, processes=0)
PCIE_PEAK = 63.0e9
COPY = prof(util=1.0, graphics_active=0.0, sm_active=0.0, link_use=(("pcie", 58.7e9 / PCIE_PEAK),))
SERVING_BURST = prof(
    util=0.65,
    graphics_active=0.65,
    sm_active=0.24,
    dram_active=0.16,
    serving=(ModelRates("llama-8b", 2180.0, 2180.0),),
)


def run(model: GpuModel, windows: list[Window]) -> list[str]:
    return [evaluate(model, w).regime for w in windows]


def test_enter_after_n_windows() -> None:
    m = GpuModel(CFG)  # enter 3, leave 2
    assert run(m, [TINY] * 4) == [UNKNOWN, UNKNOWN, LAUNCH_BOUND, LAUNCH_BOUND]


def test_conclusive_window_ends_a_quiet_spell_at_once() -> None:
    """A burst at a roofline wall, on a saturated link or making tokens is entered from
    the first window; the debounce still guards moves between two busy regimes."""
    for conclusive in (GEMM, COPY, SERVING_BURST):
        m = GpuModel(CFG)
        run(m, [IDLE_W] * 3)
        assert run(m, [conclusive]) == [assess(conclusive, CFG).regime]
    m = GpuModel(CFG)
    run(m, [TINY] * 3)
    assert run(m, [GEMM]) == [LAUNCH_BOUND]


def test_regime_seconds_follow_every_window_but_the_state_is_debounced() -> None:
    m = GpuModel(CFG)
    verdicts = [evaluate(m, w) for w in [IDLE_W, IDLE_W, IDLE_W, TINY, IDLE_W]]
    assert [v.window.regime for v in verdicts][-2:] == [LAUNCH_BOUND, IDLE]
    assert verdicts[-2].regime == IDLE


def test_single_outlier_does_not_flap() -> None:
    m = GpuModel(CFG)
    run(m, [GEMM] * 3)
    assert run(m, [DECODE, GEMM, DECODE, DECODE, GEMM]) == [COMPUTE_BOUND] * 5


def test_switch_needs_both_enter_and_leave() -> None:
    cfg = CFG.model_copy(update={"enter_windows": 1, "leave_windows": 3})
    m = GpuModel(cfg)
    run(m, [GEMM])
    assert run(m, [DECODE, DECODE, DECODE]) == [COMPUTE_BOUND, COMPUTE_BOUND, MEMORY_BOUND]


def test_unknown_entered_at_once() -> None:
    m = GpuModel(CFG)
    run(m, [GEMM] * 3)
    assert run(m, [BROKEN]) == [UNKNOWN]


def test_flag_debounced_and_forced_off_when_unusable() -> None:
    m = GpuModel(CFG)
    flags = [evaluate(m, w).hollow_busy for w in [TINY] * 4]
    assert flags == [False, False, True, True]
    assert evaluate(m, GEMM).hollow_busy  # one healthy window does not clear it (leave=2)
    assert not evaluate(m, GEMM).hollow_busy
    run(m, [TINY] * 3)
    v = evaluate(m, BROKEN)
    assert v.regime == UNKNOWN and not v.busy_unproductive
