"""GPM source: two-sample windows, integrated counters, per-metric and per-GPU failures."""

from __future__ import annotations

import pynvml
import pytest
from structlog.testing import capture_logs

from exporter.sim import fake_nvml
from exporter.snapshot import SourceResult
from exporter.sources.nvml_session import NvmlSession
from exporter.sources.profiling.gpm import GpmSource
from tests.conftest import make_node
from tests.support.profiling import sample_value


def value(result: SourceResult, gpu: str, name: str, **match: str) -> float | None:
    return sample_value(result, gpu, name, **match)


def run(nvml, clock, windows: int, dt: float = 1.0) -> tuple[GpmSource, SourceResult]:
    source = GpmSource(NvmlSession(nvml, "test"), clock=clock)
    source.open()
    result = source.poll_blocking()  # seeds the baseline sample
    for _ in range(windows):
        clock.advance(dt)
        result = source.poll_blocking()
    return source, result


def test_windows_give_ratios_that_separate_busy_from_useful(sim, clock):
    _, result = run(sim, clock, windows=3)
    assert value(result, "5", "goodput_gpu_sm_active_ratio") == pytest.approx(0.04, abs=0.01)
    assert value(result, "2", "goodput_gpu_sm_active_ratio") == pytest.approx(0.97, abs=0.03)
    assert value(result, "2", "goodput_gpu_tensor_active_ratio") == pytest.approx(0.86, abs=0.03)
    assert value(result, "3", "goodput_gpu_dram_active_ratio") == pytest.approx(0.83, abs=0.04)
    assert value(result, "2", "goodput_gpu_tensor_pipe_active_ratio", pipe="hmma") > 0.8
    assert value(result, "2", "goodput_gpu_pcie_bytes_per_second", direction="rx") == pytest.approx(
        900 * 1024 * 1024, rel=0.05
    )
    assert value(result, "0", "goodput_gpu_profiling_available", source="gpm") == 1.0


def test_counters_integrate_ratio_times_window(sim, clock):
    _, result = run(sim, clock, windows=10, dt=2.0)
    total = value(result, "2", "goodput_gpu_sm_active_seconds_total")
    assert total == pytest.approx(0.97 * 20.0, rel=0.03)
    assert value(result, "2", "goodput_gpu_profiled_seconds_total") == pytest.approx(20.0)
    host = value(result, "4", "goodput_gpu_sm_active_seconds_total") / 20.0
    assert host == pytest.approx(0.86 * 0.35, abs=0.03)  # bursts average out over windows


def test_short_windows_keep_the_baseline(sim, clock):
    source, first = run(sim, clock, windows=1)
    calls = sim.calls["nvmlGpmMetricsGet"]
    clock.advance(0.1)
    again = source.poll_blocking()
    assert sim.calls["nvmlGpmMetricsGet"] == calls, "no window under min_window"
    assert value(again, "2", "goodput_gpu_sm_active_ratio") == value(
        first, "2", "goodput_gpu_sm_active_ratio"
    )


def test_unsupported_metric_ids_are_dropped_after_first_try(sim, clock, monkeypatch):
    table = dict(fake_nvml._GPM_RATIOS)
    for metric_id in (60, 61):  # NVLink: a GPU without NVLink peers
        table.pop(metric_id)
    monkeypatch.setattr(fake_nvml, "_GPM_RATIOS", table)
    with capture_logs() as logs:
        source, result = run(sim, clock, windows=2)
    assert value(result, "2", "goodput_gpu_nvlink_bytes_per_second", direction="tx") is None
    assert value(result, "2", "goodput_gpu_sm_active_ratio") is not None
    dropped = [e for e in logs if e["event"] == "gpm_metrics_unsupported"]
    assert sorted(e["gpu"] for e in dropped) == [str(i) for i in range(8)]  # once per GPU
    assert all(60 not in st.ids for st in source._states.values())


def test_gpu_without_gpm_says_unsupported(clock):
    nvml = make_node(clock, ["compute_gemm", "compute_gemm"])
    nvml.gpus[0].gpm_supported = False  # e.g. an A100
    _, result = run(nvml, clock, windows=2)
    assert (
        value(result, "0", "goodput_gpu_profiling_available", source="gpm", reason="unsupported")
        == 0.0
    )
    assert value(result, "0", "goodput_gpu_sm_active_ratio") is None
    assert value(result, "1", "goodput_gpu_sm_active_ratio") > 0.9


def test_denied_profiling_is_reported_and_recovers(clock):
    nvml = make_node(clock, ["compute_gemm", "compute_gemm"])
    nvml.gpus[1].fail["nvmlGpmSampleGet"] = pynvml.NVML_ERROR_NO_PERMISSION
    with capture_logs() as logs:
        source, result = run(nvml, clock, windows=2)
        assert value(result, "1", "goodput_gpu_profiling_available", reason="no_permission") == 0.0
        assert result.errors == {"no_permission": 1}
        assert value(result, "0", "goodput_gpu_sm_active_ratio") > 0.9
        del nvml.gpus[1].fail["nvmlGpmSampleGet"]
        for _ in range(2):
            clock.advance(1.0)
            result = source.poll_blocking()
    assert value(result, "1", "goodput_gpu_profiling_available", source="gpm", reason="") == 1.0
    said = [(e["event"], e.get("reason")) for e in logs if e["event"].startswith("gpm_sampling")]
    assert said == [("gpm_sampling_failed", "no_permission"), ("gpm_sampling_ok", None)]


def test_lost_gpu_keeps_counters_and_other_gpus(sim, clock):
    source, before = run(sim, clock, windows=3)
    total = value(before, "7", "goodput_gpu_sm_active_seconds_total")
    clock.advance(90.0)
    result = source.poll_blocking()
    assert value(result, "7", "goodput_gpu_profiling_available", reason="gpu_lost") == 0.0
    assert value(result, "7", "goodput_gpu_sm_active_seconds_total") == total
    assert value(result, "2", "goodput_gpu_sm_active_ratio") > 0.9


def test_mig_instances_sample_through_the_parent(clock):
    nvml = make_node(clock, ["compute_gemm"])
    nvml.gpus[0].mig = [fake_nvml.FakeMig(3, 0, "MIG-cccc", 10 * 1024**3)]
    _, result = run(nvml, clock, windows=2)
    assert value(result, "0-3", "goodput_gpu_sm_active_ratio") > 0.9
    assert nvml.calls["nvmlGpmMigSampleGet"] >= 3


def test_a_gpu_that_fails_every_poll_leaks_no_sample(sim, clock):
    """A lost GPU fails nvmlGpmSampleGet on every poll; each failed poll used to keep its
    freshly allocated sample (the soak's slow RSS creep). Live samples stay one per GPU."""
    source, _ = run(sim, clock, windows=3)
    clock.advance(90.0)  # GPU 7 is lost from here on
    for _ in range(50):
        clock.advance(1.0)
        source.poll_blocking()
    assert len(sim._samples) <= len(sim.gpus)
    source.shutdown()
    assert len(sim._samples) == 0
