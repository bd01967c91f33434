"""One failing source never stops the others; failures are counted and logged once."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from exporter.metrics.self_metrics import SelfMetrics
from exporter.scheduler import Scheduler
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.base import Source


class Good(Source):
    name = "good"
    interval = 0.01

    async def poll(self) -> SourceResult:
        return SourceResult(source=self.name)


class Broken(Source):
    name = "broken"
    interval = 0.01

    async def poll(self) -> SourceResult:
        raise RuntimeError("boom")


async def test_broken_source_is_isolated():
    store = SnapshotStore("n")
    registry = CollectorRegistry()
    scheduler = Scheduler([Broken(), Good()], store, SelfMetrics(registry, "n"))
    with capture_logs() as logs:
        await scheduler.start()
        await asyncio.sleep(0.2)
        await scheduler.stop()
    snap = store.current
    assert snap.results["good"].ok
    assert not snap.results["broken"].ok
    assert snap.results["broken"].error == "RuntimeError: boom"
    errors = registry.get_sample_value(
        "goodput_exporter_source_errors_total",
        {"node": "n", "source": "broken", "reason": "exception"},
    )
    assert errors and errors >= 3
    assert len([e for e in logs if e["event"] == "source_failed"]) == 1
    assert (
        registry.get_sample_value("goodput_exporter_source_up", {"node": "n", "source": "good"})
        == 1
    )
