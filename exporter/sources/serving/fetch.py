"""Fetching one target's exposition over HTTP, bounded in time and size.

A target that hangs, drips, answers an error or streams without end costs at most the
timeout and ``max_bytes`` of memory: the body is read in chunks and the read stops as soon
as the cap is passed.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from exporter.sources.serving.errors import ScrapeError

ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
CHUNK = 64 * 1024
MODELS_MAX_BYTES = 1024 * 1024
MODEL_ID_MAX = 200
UNAUTHORIZED = frozenset({401, 403})
START_HEADER = "Process-Start-Time-Unix"
"""llama-server (and Go's promhttp) name the serving process's start in this header. Its
value is an opaque token (llama.cpp's is not a Unix time): only a change means anything."""


@dataclass(frozen=True)
class Fetched:
    text: str
    started: str = ""
    """The ``Process-Start-Time-Unix`` header, "" when absent."""


@dataclass(frozen=True)
class Request:
    """What a request to one target carries besides its URL (see ``auth.Access``)."""

    headers: Mapping[str, str] | None = None
    ssl: ssl.SSLContext | None = None
    server_hostname: str | None = None

    def __repr__(self) -> str:  # the headers hold secrets
        return "Request(...)"


PLAIN = Request()


async def fetch(
    session: aiohttp.ClientSession,
    url: str,
    timeout: float,
    max_bytes: int,
    accept: str = ACCEPT,
    request: Request = PLAIN,
) -> Fetched:
    """The body of ``url`` as text with the start header, or :class:`ScrapeError`. Error
    messages never carry the URL's user and password nor the request's headers."""
    try:
        async with asyncio.timeout(timeout):
            return await _fetch(session, url, max_bytes, accept, request)
    except TimeoutError as exc:
        raise ScrapeError("timeout", f"no complete answer within {timeout:g}s") from exc
    except aiohttp.InvalidURL as exc:
        raise ScrapeError("bad_url", f"invalid URL {redact(url)!r}") from exc
    except (aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch) as exc:
        raise ScrapeError("tls_error", redact(f"TLS: {exc}", url)) from exc
    except aiohttp.ClientConnectorError as exc:
        raise _connect_error(exc, url) from exc
    except (ValueError, UnicodeError) as exc:  # e.g. a host name IDNA cannot encode
        raise ScrapeError("bad_url", f"invalid URL {redact(url)!r}: {exc}") from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise ScrapeError("http_error", redact(f"{type(exc).__name__}: {exc}", url)) from exc


def _connect_error(exc: aiohttp.ClientConnectorError, url: str) -> ScrapeError:
    """Why a connection failed, never an empty message: over https a peer that closes
    or answers without TLS (a plain-HTTP engine) is a TLS problem, not a refusal."""
    os_error = exc.os_error
    why = str(os_error) or type(os_error).__name__
    if urlsplit(url).scheme == "https" and not isinstance(os_error, ConnectionRefusedError):
        return ScrapeError(
            "tls_error", f"TLS handshake failed ({why}): is the engine serving plain HTTP?"
        )
    return ScrapeError("connection_refused", f"cannot connect: {why}")


def redact(text: str, url: str = "") -> str:
    """``text`` without the user and password of ``url`` (or of ``text`` itself when it is
    the URL)."""
    parts = urlsplit(url or text)
    if "@" not in parts.netloc:
        return text
    userinfo = parts.netloc.rsplit("@", 1)[0]
    return text.replace(userinfo + "@", "")


async def _fetch(
    session: aiohttp.ClientSession, url: str, max_bytes: int, accept: str, request: Request
) -> Fetched:
    headers = {"Accept": accept, **(request.headers or {})}
    async with session.get(
        url,
        headers=headers,
        allow_redirects=False,
        ssl=request.ssl if request.ssl is not None else True,
        server_hostname=request.server_hostname,
    ) as resp:
        if resp.status in UNAUTHORIZED:
            raise ScrapeError("unauthorized", f"HTTP {resp.status} {resp.reason or ''}")
        if resp.status != 200:
            raise ScrapeError(f"http_{resp.status}", f"HTTP {resp.status} {resp.reason or ''}")
        declared = resp.content_length
        if declared is not None and declared > max_bytes:
            raise ScrapeError("body_too_large", f"Content-Length {declared} > {max_bytes} bytes")
        # One growing buffer, not a list of chunks joined at the end: the body is held
        # twice at most (these bytes, then the decoded text), never three times.
        body = bytearray()
        async for chunk in resp.content.iter_chunked(CHUNK):
            if len(body) + len(chunk) > max_bytes:
                raise ScrapeError("body_too_large", f"body passed {max_bytes} bytes; stopped")
            body += chunk
        started = resp.headers.get(START_HEADER, "").strip()[:64]
    try:
        return Fetched(body.decode("utf-8"), started)
    except UnicodeDecodeError as exc:
        raise ScrapeError("bad_encoding", f"body is not UTF-8 at byte {exc.start}") from exc


async def models_id(
    session: aiohttp.ClientSession,
    metrics_url: str,
    timeout: float,
    max_bytes: int,
    request: Request = PLAIN,
) -> tuple[str, str]:
    """(the first model id of the OpenAI-style ``/v1/models`` next to ``metrics_url``, "")
    or ("", why not). Bounded like a scrape; never raises."""
    parts = urlsplit(metrics_url)
    url = urlunsplit((parts.scheme, parts.netloc, "/v1/models", "", ""))
    try:
        fetched = await fetch(
            session, url, timeout, max_bytes, accept="application/json", request=request
        )
        data = json.loads(fetched.text)
        first = data["data"][0]["id"]
    except ScrapeError as exc:
        return "", f"/v1/models: {exc.reason}: {exc}"
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return "", f"/v1/models: no model id in the answer ({type(exc).__name__})"
    if not isinstance(first, str) or not first.strip():
        return "", "/v1/models: the model id is not a string"
    return first.strip()[:MODEL_ID_MAX], ""
