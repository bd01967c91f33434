"""Utilization over the poll window (issue 46): NVML's utilization samples since the last
poll, averaged over the time they cover, not NVML's last sample period; the fallback where
a device keeps no samples, said once; the counter exact on the samples."""

from __future__ import annotations

import pynvml
import pytest
from structlog.testing import capture_logs

from exporter.metrics.gpu import STATE
from exporter.readings import GpuState
from exporter.sim.fake_nvml import SAMPLE_PERIOD, FakeGpu, FakeNvml
from exporter.sim.physics import Activity, GpuPhysics
from exporter.sources import utilization as uw
from exporter.sources.nvml import NvmlSource
from exporter.sources.nvml_session import NvmlSession
from tests.conftest import ManualClock
from tests.support.typed import gpus_of

CYCLE = 1.7
BUSY = 1.1


def stalls(t: float) -> Activity:
    """A job that computes 1.1 s, then stalls 0.6 s on its host (a checkpoint write, a slow
    loader): the stall drifts through the 1 s poll windows."""
    on = (t % CYCLE) < BUSY
    return Activity(util=1.0 if on else 0.0, graphics=1.0 if on else 0.0,
                    sm_active=0.9 if on else 0.0)


def truth(t0: float, t1: float, steps: int = 2000) -> float:
    """The pattern's exact kernel-time share over (t0, t1]."""
    dt = (t1 - t0) / steps
    return sum(stalls(t0 + (i + 0.5) * dt).util for i in range(steps)) / steps


def node(clock: ManualClock, unsupported: set[str] | None = None,
         fail: dict[str, int] | None = None) -> FakeNvml:
    gpu = FakeGpu(index=0, physics=GpuPhysics(stalls, start=clock()),
                  unsupported=unsupported or set(), fail=fail or {})
    return FakeNvml([gpu], clock=clock)


def read(source: NvmlSource, name: str, **labels: str) -> float | None:
    state = gpus_of(source.poll_blocking()).get("0")
    assert isinstance(state, GpuState)
    for fam in STATE.families:
        if fam.name == name:
            for values, v in fam.rows(state):
                if set(labels.items()) <= set(zip(fam.labels, values, strict=True)):
                    return v
    return None


class Sample:
    def __init__(self, us: int, percent: int) -> None:
        self.timeStamp = us
        self.sampleValue = pynvml.c_nvmlValue_t()
        self.sampleValue.uiVal = percent


def test_window_weights_each_sample_by_the_time_it_covers() -> None:
    got = uw.window([Sample(1_200_000, 100), Sample(2_000_000, 0)],
                    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, last_seen_us=1_000_000)
    assert got is not None
    assert got.utilization == pytest.approx(0.2)  # 100 % for 0.2 s, 0 % for 0.8 s
    assert got.busy_seconds == pytest.approx(0.2)
    assert got.covered_seconds == pytest.approx(1.0)
    assert got.newest_us == 2_000_000


def test_window_keeps_only_samples_newer_than_the_last_seen_and_none_is_none() -> None:
    samples = [Sample(1_000_000, 100), Sample(1_500_000, 50)]
    assert uw.window(samples, 1, last_seen_us=1_500_000) is None
    got = uw.window(samples, 1, last_seen_us=1_000_000)
    assert got is not None and got.utilization == pytest.approx(0.5)


def test_the_first_window_is_the_newest_second_of_the_drivers_history() -> None:
    history = [Sample(i * 200_000, 100 if i < 10 else 0) for i in range(20)]
    got = uw.window(history, 1, last_seen_us=None, first_seconds=1.0)
    assert got is not None
    assert got.utilization == pytest.approx(0.0)  # the last second was idle
    assert got.covered_seconds == pytest.approx(1.0)


def test_a_gap_longer_than_a_sample_period_is_not_credited_to_one_sample() -> None:
    got = uw.window([Sample(60_000_000, 100)], 1, last_seen_us=0)
    assert got is not None
    assert got.busy_seconds == pytest.approx(uw.MAX_SAMPLE_SECONDS)


def test_sample_values_decode_by_their_value_type() -> None:
    value = pynvml.c_nvmlValue_t()
    value.dVal = 37.5
    assert uw.sample_value(pynvml.NVML_VALUE_TYPE_DOUBLE, value) == 37.5
    value.uiVal = 42
    assert uw.sample_value(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, value) == 42.0


def test_published_utilization_is_the_windows_not_nvmls_last_period(clock: ManualClock) -> None:
    """Over a load that stalls 0.6 s of every 1.7 s, every 1 s window's published
    utilization matches the load's own share within 0.03; NVML's last sample period (what
    was published before) misses by up to 1.0 in the windows a stall starts or ends in."""
    source = NvmlSource(NvmlSession(node(clock), "test"), clock=clock)
    source.open()
    start = clock()
    read(source, "goodput_gpu_utilization_ratio")
    worst_window = worst_period = 0.0
    for _ in range(30):
        clock.advance(1.0)
        got = read(source, "goodput_gpu_utilization_ratio")
        want = truth(clock() - 1.0 - start, clock() - start)
        assert got is not None
        worst_window = max(worst_window, abs(got - want))
        period = source.session.nvml.nvmlDeviceGetUtilizationRates(
            source.session.devices[0].handle).gpu / 100
        worst_period = max(worst_period, abs(period - want))
    assert worst_window <= 0.03
    assert worst_period >= 0.3  # the reading the model used to reason with


def test_the_counter_integrates_the_samples_exactly(clock: ManualClock) -> None:
    source = NvmlSource(NvmlSession(node(clock), "test"), clock=clock)
    source.open()
    start = clock()
    first = read(source, "goodput_gpu_utilization_seconds_total")
    assert first == 0.0
    for dt in (1.0, 0.4, 2.6, 1.0, 5.0):  # uneven polls, a multiple of the sample period
        clock.advance(dt)
        total = read(source, "goodput_gpu_utilization_seconds_total")
    want = truth(0.0, clock() - start) * (clock() - start)
    assert total == pytest.approx(want, abs=0.05)
    assert read(source, "goodput_gpu_utilization_method_info", method="samples") == 1.0


def test_no_new_sample_keeps_the_last_windows_value(clock: ManualClock) -> None:
    nvml = node(clock)
    source = NvmlSource(NvmlSession(nvml, "test"), clock=clock)
    source.open()
    read(source, "goodput_gpu_utilization_ratio")
    clock.advance(1.0)
    before = read(source, "goodput_gpu_utilization_ratio")
    total = read(source, "goodput_gpu_utilization_seconds_total")  # same instant: NOT_FOUND
    clock.advance(SAMPLE_PERIOD / 4)
    assert read(source, "goodput_gpu_utilization_ratio") == before
    assert read(source, "goodput_gpu_utilization_seconds_total") == total
    assert read(source, "goodput_gpu_utilization_method_info", method="samples") == 1.0


def test_an_empty_answer_is_no_new_sample(clock: ManualClock,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Some drivers answer "no sample newer" with an empty list rather than NOT_FOUND."""
    nvml = node(clock)
    source = NvmlSource(NvmlSession(nvml, "test"), clock=clock)
    source.open()
    read(source, "goodput_gpu_utilization_ratio")
    clock.advance(1.0)
    before = read(source, "goodput_gpu_utilization_ratio")
    monkeypatch.setattr(nvml, "nvmlDeviceGetSamples", lambda *_a: (1, []), raising=False)
    clock.advance(1.0)
    assert read(source, "goodput_gpu_utilization_ratio") == before
    assert read(source, "goodput_gpu_utilization_method_info", method="samples") == 1.0


def test_a_device_without_samples_falls_back_to_the_last_period_said_once(
    clock: ManualClock,
) -> None:
    nvml = node(clock, unsupported={"nvmlDeviceGetSamples"})
    source = NvmlSource(NvmlSession(nvml, "test"), clock=clock)
    source.open()
    with capture_logs() as logs:
        for _ in range(3):
            util = read(source, "goodput_gpu_utilization_ratio")
            clock.advance(1.0)
    assert util is not None
    assert read(source, "goodput_gpu_utilization_method_info", method="last_period") == 1.0
    said = [e for e in logs if e["event"] == "nvml_utilization_method"]
    assert [(e["gpu"], e["method"], e["reason"]) for e in said] == [
        ("0", "last_period", "not_supported")]
    assert nvml.calls["nvmlDeviceGetSamples"] == 1  # not asked again


def test_a_transient_samples_error_costs_one_poll_not_the_gpu(clock: ManualClock) -> None:
    nvml = node(clock, fail={"nvmlDeviceGetSamples": pynvml.NVML_ERROR_TIMEOUT})
    source = NvmlSource(NvmlSession(nvml, "test"), clock=clock)
    source.open()
    with capture_logs() as logs:
        assert read(source, "goodput_gpu_up") == 1.0
        assert read(source, "goodput_gpu_utilization_method_info", method="last_period") == 1.0
        nvml.gpus[0].fail.clear()
        clock.advance(1.0)
        assert read(source, "goodput_gpu_utilization_method_info", method="samples") == 1.0
    said = [(e["event"], e.get("reason")) for e in logs if e.get("gpu") == "0"]
    assert said == [("nvml_utilization_samples_failed", "timeout")]
