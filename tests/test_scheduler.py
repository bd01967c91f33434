"""The scheduler: one failing or wedged source never stops the others; failures are counted
and logged once; stop() is bounded and nothing is published after it. No test sleeps and
hopes: each waits on a condition with a deadline."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from exporter.metrics.self_metrics import SelfMetrics
from exporter.runtime import scheduler as scheduler_module
from exporter.runtime.scheduler import Scheduler
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.base import BlockingSource, Source


class Counting(Source):
    interval = 0.01

    def __init__(self, name: str) -> None:
        self.name = name
        self.polls = 0

    async def poll(self) -> SourceResult:
        self.polls += 1
        return SourceResult(source=self.name)


class Broken(Source):
    name = "broken"
    interval = 0.01

    async def poll(self) -> SourceResult:
        raise RuntimeError("boom")


class Wedged(BlockingSource):
    """A library call that never returns (a hung driver call) on its own thread."""

    name = "wedged"
    interval = 0.01

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def poll_blocking(self) -> SourceResult:
        self.entered.set()
        self.release.wait(30)
        return SourceResult(source=self.name)


class FailsToStart(Counting):
    async def start(self) -> None:
        raise OSError("no such device")


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        await asyncio.sleep(0.005)


def make(*sources: Source) -> tuple[Scheduler, SnapshotStore, CollectorRegistry]:
    store = SnapshotStore("n")
    registry = CollectorRegistry()
    return Scheduler(list(sources), store, SelfMetrics(registry, "n")), store, registry


async def test_broken_source_is_isolated_counted_and_logged_once() -> None:
    good = Counting("good")
    scheduler, store, registry = make(Broken(), good)
    with capture_logs() as logs:
        await scheduler.start()

        def errors() -> float:
            return registry.get_sample_value(
                "goodput_exporter_source_errors_total",
                {"node": "n", "source": "broken", "reason": "exception"},
            ) or 0.0

        await until(lambda: errors() >= 3 and good.polls >= 3)
        await scheduler.stop()
    snap = store.current
    assert snap.results["good"].ok
    assert not snap.results["broken"].ok
    assert snap.results["broken"].error == "RuntimeError: boom"
    assert len([e for e in logs if e["event"] == "source_failed"]) == 1
    up = registry.get_sample_value("goodput_exporter_source_up", {"node": "n", "source": "good"})
    assert up == 1


async def test_wedged_source_stalls_only_itself_and_stop_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scheduler_module, "CLOSE_TIMEOUT", 0.2)
    wedged, good = Wedged(), Counting("good")
    scheduler, store, _ = make(wedged, good)
    await scheduler.start()
    await until(wedged.entered.is_set)
    before = good.polls
    await until(lambda: good.polls >= before + 20)  # keeps polling while the other hangs
    assert "wedged" not in store.current.results
    started = time.monotonic()
    with capture_logs() as logs:
        await scheduler.stop()
    assert time.monotonic() - started < 2.0
    assert any(e["event"] == "source_close_timed_out" for e in logs)
    wedged.release.set()


async def test_nothing_is_published_after_stop() -> None:
    good = Counting("good")
    scheduler, store, _ = make(good)
    await scheduler.start()
    await until(lambda: good.polls >= 2)
    await scheduler.stop()
    version, polls = store.current.version, good.polls
    await asyncio.sleep(0.05)  # several intervals: a leaked task would have polled
    assert (store.current.version, good.polls) == (version, polls)


async def test_failed_start_is_counted_and_the_source_still_polls() -> None:
    source = FailsToStart("flaky")
    scheduler, _, registry = make(source)
    await scheduler.start()
    await until(lambda: source.polls >= 2)
    await scheduler.stop()
    failed = registry.get_sample_value(
        "goodput_exporter_source_errors_total",
        {"node": "n", "source": "flaky", "reason": "start_failed"},
    )
    assert failed == 1


async def test_after_publish_failure_does_not_stop_polling() -> None:
    good = Counting("good")
    store = SnapshotStore("n")
    registry = CollectorRegistry()

    def explode(_: SourceResult) -> None:
        raise ValueError("model bug")

    scheduler = Scheduler([good], store, SelfMetrics(registry, "n"), after_publish=explode)
    await scheduler.start()
    await until(lambda: good.polls >= 3)
    await scheduler.stop()
    model_errors = registry.get_sample_value(
        "goodput_exporter_source_errors_total",
        {"node": "n", "source": "model", "reason": "exception"},
    )
    assert model_errors and model_errors >= 3


class Hanging(Source):
    """An async poll that waits forever (a request with no timeout); records what it saw."""

    name = "hanging"
    interval = 0.01

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.cancelled = False
        self.closed = False

    async def poll(self) -> SourceResult:
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")

    async def close(self) -> None:
        self.closed = True


class Stubborn(Hanging):
    """A poll that swallows cancellation and keeps waiting: stop() must still return."""

    name = "stubborn"
    stubborn = True

    async def poll(self) -> SourceResult:
        self.entered.set()
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled = True
                if not self.stubborn:  # the test is over: let the loop's teardown end it
                    raise


async def test_stop_cancels_a_poll_in_flight_then_closes_the_source() -> None:
    hanging, good = Hanging(), Counting("good")
    scheduler, store, _ = make(hanging, good)
    await scheduler.start()
    await asyncio.wait_for(hanging.entered.wait(), 5)
    await until(lambda: good.polls >= 3)
    await asyncio.wait_for(scheduler.stop(), 5)
    assert hanging.cancelled and hanging.closed
    assert "hanging" not in store.current.results  # a cancelled poll publishes nothing
    assert store.current.results["good"].ok


async def test_stop_is_bounded_when_a_poll_swallows_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scheduler_module, "CLOSE_TIMEOUT", 0.2)
    stubborn = Stubborn()
    scheduler, _, _ = make(stubborn, Counting("good"))
    await scheduler.start()
    await asyncio.wait_for(stubborn.entered.wait(), 5)
    started = time.monotonic()
    with capture_logs() as logs:
        await asyncio.wait_for(scheduler.stop(), 5)
    assert time.monotonic() - started < 2.0
    assert stubborn.cancelled and stubborn.closed
    assert [e["source"] for e in logs if e["event"] == "source_stop_timed_out"] == ["stubborn"]
    stubborn.stubborn = False
