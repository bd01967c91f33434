"""DCGM source against the fake bindings in tests/fakes/dcgm: every failure mode and recovery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from exporter.readings import NvmlReading
from exporter.snapshot import Device, SnapshotStore, SourceResult
from exporter.sources.profiling.dcgm import DcgmSource, HostEngineAddress
from exporter.sources.profiling.dcgm_bindings import load_bindings
from exporter.sources.profiling.select import ProfilingSelector
from tests.support.profiling import profiling_available, sample_value
from tests.support.typed import gpus_of

FAKE_DIR = str(Path(__file__).parent / "fakes" / "dcgm")
load_bindings(FAKE_DIR, search_paths=())  # puts the fake modules on sys.path
import fake_dcgm_engine  # noqa: E402
from fake_dcgm_engine import FakeGpu, FakeHostEngine  # noqa: E402

VALUES = {1001: 0.9, 1002: 0.8, 1003: 0.4, 1004: 0.5, 1005: 0.3, 1006: 0.0, 1007: 0.2,
          1008: 0.1, 1009: 1000.0, 1010: 2000.0, 1011: 3000.0, 1012: 4000.0, 1013: 0.05,
          1014: 0.45, 1015: 0.0, 1016: 0.15}


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def engine() -> FakeHostEngine:
    eng = FakeHostEngine(gpus=[FakeGpu(0, "GPU-aaaa", dict(VALUES)),
                               FakeGpu(1, "GPU-bbbb", dict(VALUES))])
    fake_dcgm_engine.ENGINE = eng
    return eng


@pytest.fixture
def store() -> SnapshotStore:
    s = SnapshotStore("node1")
    s.publish(SourceResult(source="nvml", reading=NvmlReading(inventory=(
        Device(gpu="0", uuid="GPU-AAAA", name="NVIDIA A100"),
        Device(gpu="1", uuid="GPU-bbbb", name="NVIDIA A100"),
    ))))
    return s


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(store: SnapshotStore, clock: Clock, host: str = "localhost:5555", **kw: Any) -> DcgmSource:
    kw.setdefault("required", True)
    return DcgmSource(lambda: store.current.inventory, host, bindings_path=FAKE_DIR, clock=clock,
                      loader=lambda p: load_bindings(p, search_paths=()), **kw)


def step(src: DcgmSource, engine: FakeHostEngine, clock: Clock, dt: float = 1.0) -> SourceResult:
    clock.t += dt
    engine.advance(dt)
    return src.poll_blocking()


def value(result: SourceResult, gpu: str, name: str, **lbl: str) -> float | None:
    return sample_value(result, gpu, name, **lbl)


def available(result: SourceResult, gpu: str) -> tuple[float, str] | None:
    return profiling_available(result, gpu, "dcgm")


def test_reads_profiling_fields_as_the_gpm_samples(engine, store, clock) -> None:
    src = make(store, clock)
    result = step(src, engine, clock)
    assert result.ok
    for gpu in ("0", "1"):
        assert available(result, gpu) == (1.0, "")
        assert value(result, gpu, "goodput_gpu_sm_active_ratio") == pytest.approx(0.8)
        assert value(result, gpu, "goodput_gpu_graphics_active_ratio") == pytest.approx(0.9)
        assert value(result, gpu, "goodput_gpu_tensor_active_ratio") == pytest.approx(0.5)
        assert value(result, gpu, "goodput_gpu_dram_active_ratio") == pytest.approx(0.3)
        assert value(result, gpu, "goodput_gpu_tensor_pipe_active_ratio",
                     pipe="hmma") == pytest.approx(0.45)
        assert value(result, gpu, "goodput_gpu_pipe_active_ratio",
                     pipe="integer") == pytest.approx(0.15)
        assert value(result, gpu, "goodput_gpu_pcie_bytes_per_second", direction="rx") == 2000
        assert value(result, gpu, "goodput_gpu_nvlink_bytes_per_second", direction="tx") == 3000
    connect = [c for c in engine.calls if c[0].startswith("dcgmConnect")]
    assert connect == [("dcgmConnect_v3", "tcp://localhost:5555", 0)]
    watches = [c for c in engine.calls if c[0] == "dcgmWatchFields"]
    assert watches[0][2] == tuple(sorted(VALUES)) and watches[0][3] == 1_000_000
    for _ in range(2):
        result = step(src, engine, clock)
    assert value(result, "0", "goodput_gpu_sm_active_seconds_total") == pytest.approx(2.4)
    assert value(result, "0", "goodput_gpu_profiled_seconds_total") == pytest.approx(3.0)
    assert value(result, "0", "goodput_gpu_pcie_bytes_total", direction="tx") == 3000


def test_no_new_dcgm_sample_repeats_without_integrating(engine, store, clock) -> None:
    src = make(store, clock)
    step(src, engine, clock)
    clock.t += 1
    again = src.poll_blocking()  # engine did not sample again
    assert value(again, "0", "goodput_gpu_profiled_seconds_total") == pytest.approx(1.0)
    assert value(again, "0", "goodput_gpu_sm_active_ratio") == pytest.approx(0.8)


@pytest.mark.parametrize("required", [True, False])
def test_bindings_not_installed(tmp_path, engine, store, clock, required) -> None:
    src = DcgmSource(lambda: store.current.inventory, bindings_path=str(tmp_path), clock=clock,
                     required=required,
                     loader=lambda p: load_bindings(p, search_paths=(str(tmp_path / "x"),)))
    with capture_logs() as logs:
        results = [step(src, engine, clock) for _ in range(3)]
    for r in results:
        assert available(r, "0") == (0.0, "not_installed")
        assert r.ok is (not required)
    if required:
        assert results[0].reason == "not_installed"
        assert "DCGM Python bindings not found" in results[0].error
    else:
        assert [e["event"] for e in logs] == ["dcgm_unavailable"]
        assert "dcgm_bindings_path" in logs[0]["error"]


def test_libdcgm_missing_is_not_installed(engine, store, clock) -> None:
    engine.library_present = False
    result = step(make(store, clock), engine, clock)
    assert (result.ok, result.reason) == (False, "not_installed")
    assert "DCGM_ST_LIBRARY_NOT_FOUND" in result.error


def test_host_engine_absent_then_started_with_backoff(engine, store, clock) -> None:
    engine.running = False
    src = make(store, clock)
    result = step(src, engine, clock)
    assert (result.ok, result.reason) == (False, "unreachable")
    assert available(result, "1") == (0.0, "unreachable")
    attempts = []
    for _ in range(8):
        step(src, engine, clock)
        attempts.append(sum(1 for c in engine.calls if c[0] == "dcgmConnect_v3"))
    assert attempts[-1] < 9  # 1, 2, 4 s backoff: fewer attempts than polls
    engine.running = True
    for _ in range(9):
        result = step(src, engine, clock)
    assert result.ok and available(result, "0") == (1.0, "")


def test_host_engine_restart_reconnects_and_keeps_counters(engine, store, clock) -> None:
    src = make(store, clock)
    for _ in range(3):
        step(src, engine, clock)
    engine.restart()
    down = step(src, engine, clock)
    assert (down.ok, down.reason) == (False, "unreachable")
    assert "lost the host engine" in down.error
    assert value(down, "0", "goodput_gpu_sm_active_seconds_total") == pytest.approx(2.4)
    results = [step(src, engine, clock) for _ in range(3)]
    assert results[-1].ok and available(results[-1], "0") == (1.0, "")
    total = value(results[-1], "0", "goodput_gpu_sm_active_seconds_total")
    assert total is not None and total > 2.4
    assert len([c for c in engine.calls if c[0] == "dcgmConnect_v3"]) == 2


@pytest.mark.parametrize(("switch", "reason"), [
    ("module_loaded", "not_loaded"),
    ("root", "no_permission"),
])
def test_engine_refuses_profiling_then_recovers(engine, store, clock, switch, reason) -> None:
    setattr(engine, switch, False)
    src = make(store, clock)
    with capture_logs() as logs:
        results = [step(src, engine, clock) for _ in range(5)]
    assert all(r.ok for r in results)  # the connection is fine; the GPUs are not
    assert available(results[-1], "0") == (0.0, reason)
    assert results[-1].errors == {reason: 2}
    assert [e["event"] for e in logs].count("dcgm_profiling_unavailable") == 2  # once per GPU
    setattr(engine, switch, True)
    with capture_logs() as logs:
        results = [step(src, engine, clock) for _ in range(8)]
    assert available(results[-1], "0") == (1.0, "")
    assert [e["event"] for e in logs].count("dcgm_profiling_recovered") == 2


def test_profiler_locked_at_watch_and_later(engine, store, clock) -> None:
    engine.locked = True
    src = make(store, clock)
    result = step(src, engine, clock)
    assert available(result, "0") == (0.0, "locked")
    engine.locked = False
    for _ in range(4):
        result = step(src, engine, clock)
    assert available(result, "0") == (1.0, "")
    # Nsight takes the counters after our watch: DCGM keeps the watch but records blanks.
    engine.paused = True
    results = [step(src, engine, clock) for _ in range(3)]
    assert available(results[-1], "0") == (0.0, "no_data")
    engine.paused = False
    for _ in range(6):
        result = step(src, engine, clock)
    assert available(result, "0") == (1.0, "")


def test_fields_that_cannot_be_watched_together_shrink_the_set(engine, store, clock) -> None:
    engine.max_fields = 9
    src = make(store, clock)
    with capture_logs() as logs:
        result = step(src, engine, clock)
    assert available(result, "0") == (1.0, "")
    assert value(result, "0", "goodput_gpu_sm_active_ratio") == pytest.approx(0.8)
    assert value(result, "0", "goodput_gpu_pipe_active_ratio", pipe="fp32") is None
    assert [e["event"] for e in logs].count("dcgm_fields_reduced") == 2


def test_no_watchable_set_is_incompatible(engine, store, clock) -> None:
    engine.max_fields = 0
    result = step(make(store, clock), engine, clock)
    assert available(result, "0") == (0.0, "incompatible")


def test_unsupported_pipe_fields_on_older_gpus(engine, store, clock) -> None:
    engine.gpus[1].unsupported_fields = frozenset({1013, 1014})  # V100: no IMMA/HMMA split
    result = step(make(store, clock), engine, clock)
    assert available(result, "1") == (1.0, "")
    assert value(result, "1", "goodput_gpu_tensor_pipe_active_ratio", pipe="hmma") is None
    assert value(result, "0", "goodput_gpu_tensor_pipe_active_ratio", pipe="hmma") is not None


def test_gpu_without_profiling_and_gpu_unknown_to_dcgm(engine, store, clock) -> None:
    engine.gpus[0].profiling = False
    engine.gpus.pop(1)
    result = step(make(store, clock), engine, clock)
    assert available(result, "0") == (0.0, "unsupported")
    assert available(result, "1") == (0.0, "unsupported")


def test_not_permissioned_values(engine, store, clock) -> None:
    engine.gpus[0].denied = True
    result = step(make(store, clock), engine, clock)
    assert available(result, "0") == (0.0, "no_permission")
    assert available(result, "1") == (1.0, "")


def test_cumulative_counters_give_exact_ratios(engine, store, clock) -> None:
    engine.cumulative = True
    src = make(store, clock)
    step(src, engine, clock)
    result = step(src, engine, clock, dt=3.0)  # a missed poll: the gap is still exact
    assert value(result, "0", "goodput_gpu_sm_active_ratio") == pytest.approx(0.5)
    assert value(result, "0", "goodput_gpu_tensor_active_ratio") == pytest.approx(0.25)
    assert value(result, "0", "goodput_gpu_profiling_window_seconds") == pytest.approx(3.0)
    assert value(result, "0", "goodput_gpu_pcie_bytes_per_second",
                 direction="tx") == pytest.approx(1e9)


def test_connect_v2_unix_socket_and_embedded(engine, store, clock, monkeypatch) -> None:
    import dcgm_agent

    monkeypatch.delattr(dcgm_agent, "dcgmConnect_v3")
    result = step(make(store, clock, "unix:///run/nvidia/dcgm.sock"), engine, clock)
    assert result.ok
    assert ("dcgmConnect_v2", "/run/nvidia/dcgm.sock", 1, 0) in engine.calls
    src = make(store, clock, "embedded")
    assert step(src, engine, clock).ok
    src.shutdown()
    assert any(c[0] == "dcgmStartEmbedded" for c in engine.calls)
    assert any(c[0] == "dcgmStopEmbedded" for c in engine.calls)


def test_auto_mode_polls_only_gpus_gpm_declined(engine, store, clock) -> None:
    selector = ProfilingSelector(("gpm", "dcgm"))
    src = make(store, clock, selector=selector, required=False)
    assert not gpus_of(step(src, engine, clock))  # GPM has not probed yet: wait
    assert not any(c[0].startswith("dcgmConnect") for c in engine.calls)
    selector.report("gpm", "0", True)
    selector.report("gpm", "1", False, "unsupported")
    result = step(src, engine, clock)
    assert set(gpus_of(result)) == {"1"}
    assert selector.owner("1") == "dcgm" and selector.owner("0") == "gpm"


def test_host_engine_address_forms() -> None:
    assert HostEngineAddress.parse("10.0.0.1:5555") == HostEngineAddress("tcp", "10.0.0.1:5555")
    assert HostEngineAddress.parse("tcp://h:1") == HostEngineAddress("tcp", "h:1")
    assert HostEngineAddress.parse("/tmp/nv-hostengine") == HostEngineAddress(
        "unix", "/tmp/nv-hostengine")
    assert HostEngineAddress.parse("embedded").kind == "embedded"


def test_a_failing_group_setup_leaves_no_group_in_the_engine(engine, store, clock,
                                                            monkeypatch) -> None:
    """The host engine caps its groups; each retry of a GPU whose setup fails after the group
    was created must destroy it again, or the retries exhaust the engine for every client."""
    import dcgm_agent
    import dcgm_structs

    def refuse(*_args: object) -> int:
        raise dcgm_structs.DCGMError(dcgm_structs.DCGM_ST_GENERIC_ERROR)

    monkeypatch.setattr(dcgm_agent, "dcgmGroupAddEntity", refuse)
    src = make(store, clock)
    for _ in range(20):
        step(src, engine, clock, dt=30.0)
    assert engine.groups == {}
