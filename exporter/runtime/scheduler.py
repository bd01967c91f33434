"""Runs every source on its own cadence and publishes what it read.

Each source gets one asyncio task. A poll that raises becomes a failed result; a poll that
overruns its interval delays only its own source. State changes (a source going down or
coming back) are logged once, not on every poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from exporter.metrics.self_metrics import SelfMetrics
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.base import Source
from exporter.util import OnChange

log = structlog.get_logger("scheduler")


FIRST_POLL_WAIT = 5.0
"""Seconds the other sources wait for the inventory sources' first poll at start."""
CLOSE_TIMEOUT = 2.0
"""Seconds one source may take to close at shutdown: a wedged library call (its thread is
stuck in NVML or DCGM) must not keep the process from exiting."""

AfterPublish = Callable[[SourceResult], None]
"""Called on the event loop after each publish (the daemon runs the model from it)."""


class Scheduler:
    def __init__(
        self,
        sources: list[Source],
        store: SnapshotStore,
        metrics: SelfMetrics,
        after_publish: AfterPublish | None = None,
    ) -> None:
        self.sources = sources
        self.store = store
        self.metrics = metrics
        self.after_publish = after_publish
        self._tasks: list[asyncio.Task[None]] = []
        self._task_sources: list[Source] = []
        self._log = OnChange(log)
        self._failed: set[str] = set()
        """Sources whose last poll failed: their next success is logged at info."""

    async def start(self) -> None:
        """Start every source's loop. The inventory sources (``starts_first``) start first and
        the others once those have published (or after ``FIRST_POLL_WAIT``), so the kubelet,
        cgroup and profiling-off sources match GPUs at their first poll instead of ten
        seconds later."""
        first = [s for s in self.sources if s.starts_first]
        started = [asyncio.Event() for _ in first]
        for source, event in zip(first, started, strict=True):
            self._spawn(source, event)
        if started:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(e.wait() for e in started)), FIRST_POLL_WAIT
                )
        for source in self.sources:
            if not source.starts_first:
                self._spawn(source, None)

    def add(self, source: Source) -> None:
        """Start polling a source created after start (a reload added serving targets)."""
        self.sources.append(source)
        self._spawn(source, None)

    def _spawn(self, source: Source, first_poll: asyncio.Event | None) -> None:
        self._tasks.append(
            asyncio.create_task(self._run(source, first_poll), name=f"poll-{source.name}")
        )
        self._task_sources.append(source)

    async def stop(self) -> None:
        """Cancel every source's loop, wait at most ``CLOSE_TIMEOUT`` for them to end, then
        close the sources. A poll that swallows its cancellation is left behind with one log
        line instead of holding shutdown (and a ``wait_for`` around ``stop()``) forever."""
        tasks = {task: source for task, source in zip(self._tasks, self._task_sources, strict=True)}
        self._tasks, self._task_sources = [], []
        for task in tasks:
            task.cancel()
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT)
            for task in done:
                if not task.cancelled():
                    task.exception()  # retrieved: an ended loop must not warn at exit
            for task in pending:
                log.warning("source_stop_timed_out", source=tasks[task].name, seconds=CLOSE_TIMEOUT)
        for source in self.sources:
            try:
                await asyncio.wait_for(source.close(), CLOSE_TIMEOUT)
            except TimeoutError:
                log.warning("source_close_timed_out", source=source.name, seconds=CLOSE_TIMEOUT)
            except Exception as exc:  # a broken close must not block shutdown
                log.warning("source_close_failed", source=source.name, error=str(exc))

    async def poll_once(self, source: Source) -> SourceResult:
        """One poll of ``source``, measured, recorded and published. Never raises."""
        started = time.perf_counter()
        try:
            result = await source.poll()
        except Exception as exc:
            result = SourceResult(
                source=source.name,
                ok=False,
                reason="exception",
                error=f"{type(exc).__name__}: {exc}",
            )
        duration = time.perf_counter() - started
        if not result.duration_seconds:
            result = _with_duration(result, duration)
        self._record(source.name, result, duration)
        self.store.publish(result)
        if self.after_publish is not None:
            try:
                self.after_publish(result)
            except Exception as exc:  # the model failing must not stop polling
                log.error("after_publish_failed", source=source.name, error=f"{exc!r}")
                self.metrics.errors.labels(self.metrics.node, "model", "exception").inc()
        return result

    async def _run(self, source: Source, first_poll: asyncio.Event | None = None) -> None:
        try:
            await source.start()
        except Exception as exc:
            self._record_failure_to_start(source, exc)
        next_tick = time.monotonic()
        while True:
            await self.poll_once(source)
            if first_poll is not None:
                first_poll.set()
            next_tick += source.interval
            delay = next_tick - time.monotonic()
            if delay < 0:  # overran: skip missed ticks instead of bursting
                next_tick = time.monotonic()
                delay = 0
            await asyncio.sleep(delay)

    def _record_failure_to_start(self, source: Source, exc: Exception) -> None:
        log.error("source_start_failed", source=source.name, error=f"{type(exc).__name__}: {exc}")
        self.metrics.errors.labels(self.metrics.node, source.name, "start_failed").inc()

    def _record(self, name: str, result: SourceResult, duration: float) -> None:
        m = self.metrics
        m.poll_duration.labels(m.node, name).observe(duration)
        m.source_up.labels(m.node, name).set(1 if result.ok else 0)
        if result.stuck_reads is not None:
            m.reads_stuck.labels(m.node, name).set(result.stuck_reads)
        if result.ok:
            m.last_success.labels(m.node, name).set(result.timestamp)
        else:
            m.errors.labels(m.node, name, result.reason or "error").inc()
        for reason, count in result.errors.items():
            m.errors.labels(m.node, name, reason).inc(count)
        # States in words; the first success is start-up detail (debug), a recovery is news.
        state = "ok" if result.ok else f"failed: {result.reason or 'error'}"
        if result.ok:
            self._log(name, state, "starting", event="source_ok", source=name,
                      level="debug" if name not in self._failed else "info",
                      duration_seconds=round(duration, 4))
            self._failed.discard(name)
        else:
            self._failed.add(name)
            self._log(name, state, None, event="source_failed", level="error", source=name,
                      reason=result.reason, error=result.error)


def _with_duration(result: SourceResult, duration: float) -> SourceResult:
    from dataclasses import replace

    return replace(result, duration_seconds=duration)
