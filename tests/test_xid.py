"""XID events arrive on their own thread and are counted per GPU and code."""

from __future__ import annotations

import time

from exporter.sources.nvml_session import NvmlSession
from exporter.sources.xid import XidSource
from tests.support.typed import gpus_of


def test_xid_events_are_counted(sim, clock):
    source = XidSource(NvmlSession(sim, "test"))
    source.open()
    try:
        sim.inject_xid(3, 48)
        sim.inject_xid(3, 48)
        sim.inject_xid(1, 13)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            result = source.poll_blocking()
            counts = {
                (g, code, n) for g, state in gpus_of(result).items() for code, n in state.counts
            }
            if len(counts) == 2:
                break
            time.sleep(0.02)
        assert ("3", 48, 2) in counts
        assert ("1", 13, 1) in counts
        last = {g: state.last for g, state in gpus_of(result).items()}
        assert last["3"] == 48 and last["0"] == 0
    finally:
        source.shutdown()


def test_lost_gpu_raises_xid_79(sim, clock):
    source = XidSource(NvmlSession(sim, "test"))
    source.open()
    try:
        clock.advance(95.0)
        deadline = time.monotonic() + 5
        seen = None
        while time.monotonic() < deadline and not seen:
            result = source.poll_blocking()
            state = gpus_of(result).get("7")
            seen = state.counts if state else None
            time.sleep(0.05)
        assert seen and seen[0][0] == 79
    finally:
        source.shutdown()
