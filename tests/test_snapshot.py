"""The snapshot store: atomic swaps that share other sources' results, verdicts in the next
snapshot, readiness, typed views across sources, and listeners that cannot break a publish."""

from __future__ import annotations

import threading

import pytest
from structlog.testing import capture_logs

from exporter.readings import (
    Device,
    GpuState,
    GpuVerdict,
    NodeVerdicts,
    NvmlReading,
    ProfilingReading,
    ProfilingStatus,
    ProfilingWindow,
)
from exporter.snapshot import Snapshot, SnapshotStore, SourceResult

DEVICES = (Device("0", "GPU-0"), Device("1", "GPU-1"))


def test_publish_swaps_and_shares_the_other_results() -> None:
    store = SnapshotStore("n")
    nvml = SourceResult(source="nvml", reading=NvmlReading(DEVICES, {"0": GpuState()}))
    first = store.publish(nvml)
    second = store.publish(SourceResult(source="xid"))
    assert second.version == first.version + 1
    assert second.results["nvml"] is nvml  # shared, not copied
    assert first.results.keys() == {"nvml"}  # the old snapshot is untouched
    assert store.current is second


def test_verdicts_land_in_the_next_snapshot_only() -> None:
    store = SnapshotStore("n")
    before = store.publish(SourceResult(source="nvml", reading=NvmlReading(inventory=DEVICES)))
    verdicts = NodeVerdicts(gpus={"0": GpuVerdict("idle", "idle")})
    after = store.publish_verdicts(verdicts)
    assert before.verdicts.gpus == {} and after.verdicts is verdicts
    assert after.results is before.results


def test_readiness_waits_for_an_inventory_and_says_why() -> None:
    store = SnapshotStore("n", ready_sources=["nvml"])
    assert store.current.ready_reason
    store.publish(SourceResult(source="nvml", ok=False, reason="x", error="NVML init failed"))
    assert "NVML init failed" in store.current.ready_reason
    store.publish(SourceResult(source="xid"))  # not a readiness source
    assert store.current.ready_reason
    store.publish(SourceResult(source="nvml", reading=NvmlReading(inventory=DEVICES)))
    assert store.current.ready_reason == ""


def test_profiling_view_prefers_the_available_backend_in_order() -> None:
    store = SnapshotStore("n", profiling_order=("gpm", "dcgm"))
    window = ProfilingWindow(1.0, sm_active=0.5)
    store.publish(SourceResult(source="gpm", reading=ProfilingReading({
        "0": ProfilingStatus("gpm", False, "unsupported"),
        "1": ProfilingStatus("gpm", True, window=window),
    })))
    store.publish(SourceResult(source="dcgm", reading=ProfilingReading({
        "0": ProfilingStatus("dcgm", True, window=window),
        "1": ProfilingStatus("dcgm", True, window=window),
    })))
    snap = store.current
    assert snap.profiling("0").backend == "dcgm"  # the one that works
    assert snap.profiling("1").backend == "gpm"  # both work: preference order
    assert {s.backend for s in snap.profiling_rows("0")} == {"gpm", "dcgm"}
    assert snap.profiling("9") is None


def test_a_raising_listener_is_logged_and_the_others_still_told() -> None:
    store = SnapshotStore("n")
    seen: list[Snapshot] = []

    def broken(_: Snapshot) -> None:
        raise RuntimeError("encoder bug")

    store.subscribe(broken)
    store.subscribe(seen.append)
    with capture_logs() as logs:
        snap = store.publish(SourceResult(source="nvml", reading=NvmlReading(inventory=DEVICES)))
    assert seen == [snap] and store.current is snap
    assert [e["event"] for e in logs] == ["snapshot_listener_failed"]


def test_concurrent_publishers_lose_no_result() -> None:
    store = SnapshotStore("n")
    names = [f"s{i}" for i in range(8)]

    def publish(name: str) -> None:
        for _ in range(200):
            store.publish(SourceResult(source=name))

    threads = [threading.Thread(target=publish, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(store.current.results) == set(names)
    assert store.current.version == 8 * 200


def test_debug_json_is_plain() -> None:
    import json

    store = SnapshotStore("n")
    store.publish(SourceResult(source="nvml", reading=NvmlReading(DEVICES, {"0": GpuState()})))
    doc = json.loads(json.dumps(store.current.to_json()))
    assert doc["sources"]["nvml"]["inventory"][1]["uuid"] == "GPU-1"


def test_results_and_verdicts_racing_lose_neither_and_readers_see_a_growing_version() -> None:
    """A source thread and the model publish at once while a reader watches: no verdict is
    dropped by a results publish (or the reverse), versions only grow, and a snapshot a
    reader holds never changes under it."""
    store = SnapshotStore("n")
    rounds = 300
    done = threading.Event()
    seen: list[int] = []
    held: list[tuple[Snapshot, int, frozenset[str]]] = []

    def results() -> None:
        for i in range(rounds):
            reading = NvmlReading(inventory=DEVICES)
            store.publish(SourceResult(source="nvml", reading=reading, timestamp=float(i)))

    def verdicts() -> None:
        for i in range(rounds):
            store.publish_verdicts(NodeVerdicts(errors={"step": i}))

    def reader() -> None:
        while not done.is_set():
            snap = store.current
            seen.append(snap.version)
            if len(held) < 50:
                held.append((snap, snap.version, frozenset(snap.results)))

    threads = [threading.Thread(target=f) for f in (results, verdicts)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    snap = store.current
    assert snap.version == 2 * rounds
    assert snap.verdicts.errors == {"step": rounds - 1}
    assert snap.results["nvml"].timestamp == float(rounds - 1)
    assert seen == sorted(seen)
    for old, version, keys in held:
        assert old.version == version and frozenset(old.results) == keys
    with pytest.raises(TypeError):
        snap.results["x"] = SourceResult(source="x")  # type: ignore[index]
