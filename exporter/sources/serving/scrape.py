"""One scrape of one target, from URL to :class:`Reading`, never raising."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

import aiohttp

from exporter.sources.serving.adapter import Reading, UnknownEngine, read_body
from exporter.sources.serving.errors import ScrapeError
from exporter.sources.serving.exposition import ExpositionError
from exporter.sources.serving.fetch import PLAIN, Request, fetch
from exporter.sources.serving.targets import Target


@dataclass(frozen=True)
class Outcome:
    target: Target
    duration: float
    reading: Reading | None = None
    reason: str = ""
    error: str = ""
    request: Request = PLAIN
    """The credentials this scrape used, for follow-up requests to the same engine."""
    waited: float = 0.0
    """Seconds it waited for a scrape slot before it started (exporter/sources/serving/pool.py)."""

    @property
    def ok(self) -> bool:
        return self.reading is not None


def interpret(text: str, engine: str = "", model: str = "") -> Reading:
    """Parse, recognise and read a body (CPU work: run it off the event loop)."""
    return read_body(text, engine, model)


async def scrape(
    session: aiohttp.ClientSession,
    target: Target,
    timeout: float,
    max_bytes: int,
) -> Outcome:
    started = time.perf_counter()
    if target.invalid:
        return _failed(target, started, target.invalid_reason, target.invalid)
    request = PLAIN
    try:
        if target.access is not None:
            request = target.access.resolve()
        fetched = await fetch(session, target.url, timeout, max_bytes, request=request)
        reading = await asyncio.to_thread(interpret, fetched.text, target.engine, target.model)
        if not reading.started and fetched.started:
            reading = replace(reading, started="header:" + fetched.started)
    except ScrapeError as exc:
        return _failed(target, started, exc.reason, str(exc))
    except ExpositionError as exc:
        return _failed(target, started, "parse_error", str(exc))
    except UnknownEngine as exc:
        return _failed(target, started, "unknown_engine", str(exc))
    except Exception as exc:  # a bug here must cost one target, not the source
        return _failed(target, started, "internal_error", f"{type(exc).__name__}: {exc}")
    return Outcome(target, time.perf_counter() - started, reading, request=request)


def _failed(target: Target, started: float, reason: str, error: str) -> Outcome:
    return Outcome(target, time.perf_counter() - started, None, reason, error)
