"""Fetching one target's exposition over HTTP, bounded in time and size.

A target that hangs, drips, answers an error or streams without end costs at most the
timeout and ``max_bytes`` of memory: the body is read in chunks and the read stops as soon
as the cap is passed.
"""

from __future__ import annotations

import asyncio

import aiohttp

ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
CHUNK = 64 * 1024


class ScrapeError(Exception):
    """A scrape failed; ``reason`` is a short snake_case code for metrics and logs."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


async def fetch(session: aiohttp.ClientSession, url: str, timeout: float, max_bytes: int) -> str:
    """The body of ``url`` as text, or :class:`ScrapeError`."""
    try:
        async with asyncio.timeout(timeout):
            return await _fetch(session, url, max_bytes)
    except TimeoutError as exc:
        raise ScrapeError("timeout", f"no complete answer within {timeout:g}s") from exc
    except aiohttp.InvalidURL as exc:
        raise ScrapeError("bad_url", f"invalid URL {url!r}") from exc
    except aiohttp.ClientConnectorError as exc:
        raise ScrapeError("connection_refused", f"cannot connect: {exc.os_error}") from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise ScrapeError("http_error", f"{type(exc).__name__}: {exc}") from exc


async def _fetch(session: aiohttp.ClientSession, url: str, max_bytes: int) -> str:
    async with session.get(url, headers={"Accept": ACCEPT}, allow_redirects=False) as resp:
        if resp.status != 200:
            raise ScrapeError(f"http_{resp.status}", f"HTTP {resp.status} {resp.reason or ''}")
        declared = resp.content_length
        if declared is not None and declared > max_bytes:
            raise ScrapeError("body_too_large", f"Content-Length {declared} > {max_bytes} bytes")
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(CHUNK):
            size += len(chunk)
            if size > max_bytes:
                raise ScrapeError("body_too_large", f"body passed {max_bytes} bytes; stopped")
            chunks.append(chunk)
    body = b"".join(chunks)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError("bad_encoding", f"body is not UTF-8 at byte {exc.start}") from exc
