"""NVML source against the pynvml drop-in: values, and every per-GPU failure path."""

from __future__ import annotations

import pynvml
import pytest
from structlog.testing import capture_logs

from exporter.metrics.gpu import IDENTITY, STATE
from exporter.readings import ProcessInfo
from exporter.sim.fake_nvml import FakeMig
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.nvml import NvmlSource
from exporter.sources.nvml_session import NvmlSession, NvmlUnavailable
from tests.conftest import ManualClock, make_node
from tests.support.typed import gpus_of


def value(result: SourceResult, gpu: str, name: str, **match: str) -> float | None:
    """What /metrics would show for ``gpu``: the typed reading through the declared family
    (optional families included)."""
    readings = {
        id(STATE): gpus_of(result).get(gpu),
        id(IDENTITY): {d.gpu: d for d in result.reading.inventory or ()}.get(gpu),
    }
    for group in (STATE, IDENTITY):
        reading = readings[id(group)]
        for fam in group.families:
            if fam.name != name or reading is None:
                continue
            for labels, v in fam.rows(reading):  # type: ignore[arg-type]
                if set(match.items()) <= set(zip(fam.labels, labels, strict=True)):
                    return v
    return None


def processes(result: SourceResult) -> list[ProcessInfo]:
    return [p for state in gpus_of(result).values() for p in state.processes]


def poll(nvml, clock: ManualClock, steps: int = 2, dt: float = 1.0) -> SourceResult:
    source = NvmlSource(NvmlSession(nvml, "test"), clock=clock)
    source.open()
    result = source.poll_blocking()
    for _ in range(steps - 1):
        clock.advance(dt)
        result = source.poll_blocking()
    return result


def test_healthy_node_reports_every_gpu(sim, clock):
    result = poll(sim, clock)
    assert result.ok
    assert [d.gpu for d in result.reading.inventory] == [str(i) for i in range(8)]
    for gpu in map(str, range(8)):
        assert value(result, gpu, "goodput_gpu_up") == 1.0
        assert value(result, gpu, "goodput_gpu_memory_total_bytes") == 80 * 1024**3
    # launch-bound GPU 5: nvidia-smi says ~100 % busy
    assert value(result, "5", "goodput_gpu_utilization_ratio") >= 0.9
    assert value(result, "0", "goodput_gpu_utilization_ratio") == 0.0
    # power follows activity
    assert (
        value(result, "2", "goodput_gpu_power_watts")
        > value(result, "0", "goodput_gpu_power_watts") + 300
    )
    assert value(result, "1", "goodput_gpu_processes") == 1.0
    assert {p.pid for p in processes(result)} >= {4101, 4102}


def test_energy_counter_integrates_power(sim, clock):
    source = NvmlSource(NvmlSession(sim, "test"), clock=clock)
    source.open()
    first = source.poll_blocking()
    for _ in range(4):  # the energy counter is re-read on the 5th poll
        clock.advance(2.5)
        second = source.poll_blocking()
    joules = value(second, "2", "goodput_gpu_energy_joules_total") - value(
        first, "2", "goodput_gpu_energy_joules_total"
    )
    watts = value(second, "2", "goodput_gpu_power_watts")
    assert joules == pytest.approx(watts * 10.0, rel=0.05)


def test_thermal_gpu_counts_throttle_time(sim, clock):
    result = poll(sim, clock, steps=6)
    assert value(result, "6", "goodput_gpu_clock_event_active", reason="hw_thermal_slowdown") == 1.0
    # throttle time is re-read every 5th poll: poll 5 read it 4 s after the first
    assert value(
        result, "6", "goodput_gpu_clock_event_seconds_total", reason="hw_thermal_slowdown"
    ) == pytest.approx(4.0, abs=0.1)
    assert value(result, "6", "goodput_gpu_clock_hertz", domain="sm") < value(
        result, "2", "goodput_gpu_clock_hertz", domain="sm"
    )
    assert value(result, "6", "goodput_gpu_temperature_celsius") > 85


def test_error_on_one_gpu_leaves_the_others_up(sim, clock):
    sim.gpus[1].fail["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_NO_PERMISSION
    with capture_logs() as logs:
        result = poll(sim, clock, steps=3)
    assert value(result, "1", "goodput_gpu_up", reason="no_permission") == 0.0
    assert value(result, "1", "goodput_gpu_power_watts") is None
    assert all(value(result, g, "goodput_gpu_up") == 1.0 for g in "0234567")
    assert result.errors == {"no_permission": 1}
    downs = [e for e in logs if e["event"] == "gpu_down"]
    assert len(downs) == 1, "one log line per state change, not per poll"
    assert downs[0]["gpu"] == "1"


def test_lost_gpu_is_marked_lost_never_a_crash(sim, clock):
    source = NvmlSource(NvmlSession(sim, "test"), clock=clock)
    source.open()
    assert value(source.poll_blocking(), "7", "goodput_gpu_up") == 1.0
    clock.advance(91.0)
    with capture_logs() as logs:
        for _ in range(3):  # keeps polling a lost GPU without crashing
            result = source.poll_blocking()
            clock.advance(1.0)
    assert result.ok
    assert value(result, "7", "goodput_gpu_up", reason="gpu_lost") == 0.0
    assert value(result, "7", "goodput_gpu_info") == 1.0  # identity stays visible
    assert value(result, "2", "goodput_gpu_up") == 1.0
    assert result.errors == {"gpu_lost": 1}  # -> goodput_exporter_source_errors_total
    downs = [(e["gpu"], e["reason"]) for e in logs if e["event"] == "gpu_down"]
    assert downs == [("7", "gpu_lost")], "one log line naming the GPU and the reason"


def test_unsupported_metric_is_dropped_for_that_gpu_and_logged_once(sim, clock):
    sim.gpus[3].unsupported.add("nvmlDeviceGetTotalEnergyConsumption")
    with capture_logs() as logs:
        result = poll(sim, clock, steps=3)
    assert value(result, "3", "goodput_gpu_energy_joules_total") is None
    assert value(result, "3", "goodput_gpu_up") == 1.0
    assert value(result, "4", "goodput_gpu_energy_joules_total") is not None
    said = [e for e in logs if e["event"] == "nvml_metric_unsupported"]
    assert [(e["gpu"], e["metric"]) for e in said] == [("3", "energy")]
    # read on the first poll of each GPU (every 5th after that), tried once on gpu 3
    assert sim.calls["nvmlDeviceGetTotalEnergyConsumption"] == 8


def test_transient_process_list_error_skips_one_poll_not_forever(sim, clock):
    source = NvmlSource(NvmlSession(sim, "test"), clock=clock)
    source.open()
    sim.gpus[1].fail["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVML_ERROR_TIMEOUT
    with capture_logs() as logs:
        for _ in range(3):
            clock.advance(1.0)
            failed = source.poll_blocking()
        del sim.gpus[1].fail["nvmlDeviceGetComputeRunningProcesses"]
        clock.advance(1.0)
        back = source.poll_blocking()
    assert value(failed, "1", "goodput_gpu_processes") is None  # not read: no series, not 0
    assert value(failed, "1", "goodput_gpu_up") == 1.0
    assert value(back, "1", "goodput_gpu_processes") == 1.0  # attribution comes back
    assert any(p.gpu == "1" for p in processes(back))
    said = [(e["event"], e.get("reason")) for e in logs if e.get("gpu") == "1"]
    assert said == [("nvml_processes_failed", "timeout"), ("nvml_processes_ok", None)]


def test_missing_library_is_a_clear_error(clock):
    nvml = make_node(clock, ["idle"])
    nvml.library_present = False
    with pytest.raises(NvmlUnavailable, match="NVML Shared Library Not Found"):
        NvmlSession(nvml).open()


def test_discovery_failure_still_lists_the_gpu_as_down(clock):
    nvml = make_node(clock, ["idle", "compute_gemm"])
    nvml.gpus[0].fail["nvmlDeviceGetHandleByIndex"] = pynvml.NVML_ERROR_UNKNOWN
    result = poll(nvml, clock, steps=1)
    assert value(result, "0", "goodput_gpu_up", reason="discovery_failed") == 0.0
    assert value(result, "1", "goodput_gpu_up") == 1.0


def test_mig_instances_are_discovered_with_their_identity(clock):
    nvml = make_node(clock, ["compute_gemm"])
    nvml.gpus[0].mig = [
        FakeMig(1, 0, "MIG-aaaa", 20 * 1024**3, 5 * 1024**3),
        FakeMig(2, 0, "MIG-bbbb", 20 * 1024**3, 0),
    ]
    result = poll(nvml, clock, steps=1)
    gpus = {d.gpu: d for d in result.reading.inventory}
    assert set(gpus) == {"0", "0-1", "0-2"}
    assert gpus["0-1"].uuid == "MIG-aaaa" and gpus["0-1"].parent_uuid == nvml.gpus[0].uuid
    assert value(result, "0-1", "goodput_gpu_memory_used_bytes") == 5 * 1024**3
    # utilization is not supported on MIG handles: dropped, the instance stays up
    assert value(result, "0-1", "goodput_gpu_utilization_ratio") is None
    assert value(result, "0-1", "goodput_gpu_up") == 1.0


def test_store_is_ready_after_first_gpu_poll(sim, clock):
    store = SnapshotStore("node-a", ready_sources=["nvml"])
    assert store.current.ready_reason
    store.publish(poll(sim, clock, steps=1))
    assert store.current.ready_reason == ""


def test_slow_readings_are_repeated_between_reads(sim, clock):
    result = poll(sim, clock, steps=5)
    assert sim.calls["nvmlDeviceGetRemappedRows"] == 8  # once per GPU in 5 polls
    assert sim.calls["nvmlDeviceGetPowerUsage"] == 5 * 8
    assert value(result, "2", "goodput_gpu_remapped_rows_total", cause="correctable") == 0.0
    assert value(result, "2", "goodput_gpu_power_limit_watts") == 700.0


def test_source_reports_nvml_unavailable_and_recovers(clock):
    nvml = make_node(clock, ["compute_gemm"])
    nvml.library_present = False
    source = NvmlSource(NvmlSession(nvml, "test"), clock=clock)
    failed = source.poll_blocking()
    assert not failed.ok and failed.reason == "nvml_unavailable"
    assert "NVML Shared Library Not Found" in failed.error
    nvml.library_present = True  # e.g. the driver finished loading
    assert source.poll_blocking().ok
    source.shutdown()
    assert nvml.initialized == 0


def test_device_count_failure_is_nvml_unavailable(clock):
    nvml = make_node(clock, ["idle"])
    original = nvml.nvmlDeviceGetCount

    def broken() -> int:
        original()
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    nvml.nvmlDeviceGetCount = broken
    with pytest.raises(NvmlUnavailable, match="device discovery failed"):
        NvmlSession(nvml).open()
    assert nvml.initialized == 0


def test_binding_without_a_call_costs_that_reading_only(sim, clock, monkeypatch):
    """An older nvidia-ml-py lacking a function raises AttributeError, not NVMLError: that
    reading is dropped (once, with a reason) and every other reading of every GPU stays."""

    def missing(*_args, **_kwargs):
        raise AttributeError("module 'pynvml' has no attribute 'nvmlDeviceGetTotalEnergy...'")

    monkeypatch.setattr(sim, "nvmlDeviceGetTotalEnergyConsumption", missing)
    with capture_logs() as logs:
        result = poll(sim, clock, steps=3)
    assert result.ok
    for gpu in map(str, range(8)):
        assert value(result, gpu, "goodput_gpu_up") == 1.0
        assert value(result, gpu, "goodput_gpu_energy_joules_total") is None
        assert value(result, gpu, "goodput_gpu_power_watts") is not None
    dropped = [e for e in logs if e["event"] == "nvml_metric_unsupported"]
    expected = {(str(g), "binding_error") for g in range(8)}
    assert {(e["gpu"], e["reason"]) for e in dropped} == expected
