"""Published counters never decrease, whatever the engine's raw counter does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.sources.serving.accumulate import DeltaTracker, Totals


@given(st.lists(st.floats(min_value=0, max_value=1e12), max_size=40),
       st.integers(min_value=1, max_value=8))
def test_totals_are_monotonic_under_resets_and_splits(raw: list[float], gpus: int) -> None:
    tracker, totals = DeltaTracker(), Totals()
    last = 0.0
    for value in raw:
        share = tracker.delta("engine", value) / gpus
        for gpu in range(gpus):
            totals.add(gpu, share)
        now = sum(v for _, v in totals.items())
        assert now >= last
        last = now


def test_reset_adds_the_new_value() -> None:
    tracker = DeltaTracker()
    assert [tracker.delta("k", v) for v in (10, 15, 3, 4)] == [10, 5, 3, 1]
    tracker.forget_where(lambda key: key == "k")
    assert tracker.delta("k", 7) == 7
