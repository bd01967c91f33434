"""What NCCL's count of collectives changes in the job model: a latency-bound collective's
own time is transfer, the tensor-core kernels next to each collective ramp up hollow (not
waiting), and a GPU syncing through collectives too small for its links' floor still
counts its waiting. Without a count (no RAS, CUDA graphs) nothing changes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.model.config import ModelConfig
from exporter.model.core import Window
from exporter.model.jobs import exchanging, ramp_hollow, transfer_time
from exporter.model.windows import WindowBuilder
from exporter.readings import CollectiveReading, CollectiveState, Device
from exporter.snapshot import SnapshotStore, SourceResult

CFG = ModelConfig()
DECODE = Window(graphics_active=0.80, sm_active=0.59, tensor_active=0.54,
                profiling_available=True, processes=1,
                nvlink_bytes_per_second=3.84e9,
                bus_bytes_per_second=(("nvlink", "rx", 1.92e9), ("nvlink", "tx", 1.92e9)))
"""A tensor-parallel decode step's window on H200 (tp_decode, final run A, GPU 0)."""


def test_a_counted_collectives_latency_is_its_transfer() -> None:
    """4,069 collectives a second at 9 us: 0.037 of the window, where its NVLink bytes at
    the link's rate say 0.010; the ranks timed the collectives alone at 0.039."""
    assert transfer_time(DECODE, CFG) == pytest.approx(0.0101, abs=1e-3)
    counted = replace(DECODE, collectives_per_second=4069.0)
    assert transfer_time(counted, CFG) == pytest.approx(0.0366, abs=1e-3)


def test_bytes_win_where_the_collectives_are_large() -> None:
    """Two 128 MiB all-reduces a step, 69 steps a second: the bytes' time, not latency."""
    big = replace(DECODE, bus_bytes_per_second=(("nvlink", "rx", 17e9), ("nvlink", "tx", 17e9)),
                  collectives_per_second=138.0)
    assert transfer_time(big, CFG) == pytest.approx(17e9 / CFG.collective_link_bytes_per_second)


def test_the_ramp_is_per_collective_and_only_for_tensor_core_work() -> None:
    counted = replace(DECODE, collectives_per_second=4069.0)
    assert ramp_hollow(counted, CFG) == pytest.approx(4069 * 8e-6)
    assert ramp_hollow(DECODE, CFG) == 0.0  # no count: nothing assumed
    assert ramp_hollow(replace(counted, tensor_active=0.0), CFG) == 0.0  # FP32 pipes


def test_the_ramp_is_no_longer_than_the_kernels_work() -> None:
    """1024-square GEMMs of 5 us between collectives: tensor 0.013, 7,144 collectives a
    second; 8 us each would be 0.057 of hollow time, more than their SMs' whole work."""
    tiny = replace(DECODE, tensor_active=0.013, collectives_per_second=7144.0)
    assert ramp_hollow(tiny, CFG) == pytest.approx(0.013 / CFG.tensor_per_sm_active_second)


def test_a_counted_collective_is_exchanging_below_the_link_floor() -> None:
    quiet = replace(DECODE, nvlink_bytes_per_second=0.0, bus_bytes_per_second=(
        ("nvlink", "rx", 0.0), ("nvlink", "tx", 0.0)))
    assert not exchanging(quiet, CFG)
    assert exchanging(replace(quiet, collectives_per_second=532.0), CFG)


def _store(state: CollectiveState, at: float) -> SnapshotStore:
    store = SnapshotStore("node-a")
    store.publish(SourceResult(source="nccl", timestamp=at,
                               reading=CollectiveReading(gpus={"0": state}, answered=True)))
    return store


def test_the_window_takes_the_rate_while_the_source_answers() -> None:
    builder = WindowBuilder(CFG)
    device = Device("0", "GPU-0")
    snap = _store(CollectiveState(total=40690.0, per_second=4069.0), at=50.0).current
    assert builder.build(snap, device, now=100.0, seconds=1.0).collectives_per_second == 4069.0
    stale = builder.build(snap, device, now=100.0 + CFG.stale_after_seconds + 1, seconds=1.0)
    assert stale.collectives_per_second is None  # the source stopped answering


def test_no_reading_no_count() -> None:
    window = WindowBuilder(CFG).build(SnapshotStore("n").current, Device("0", "GPU-0"),
                                      now=1.0, seconds=1.0)
    assert window.collectives_per_second is None


def test_a_bad_rate_is_refused_and_named() -> None:
    builder = WindowBuilder(CFG)
    snap = _store(CollectiveState(total=1.0, per_second=float("nan")), at=1.0).current
    window = builder.build(snap, Device("0", "GPU-0"), now=1.0, seconds=1.0)
    assert window.collectives_per_second is None and "0/collectives" in builder.bad_inputs
