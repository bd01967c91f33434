"""Where ``top`` reads the exposition from: a running daemon over HTTP(S), or a simulated
node started in this process (``top --simulate``), served on a loopback port so both read
through the same HTTP path a scraper uses."""

from __future__ import annotations

import asyncio
import base64
import queue
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from exporter.urls import redact

if TYPE_CHECKING:
    from aiohttp import web

USER_AGENT = "gpu-goodput-exporter-top"
MAX_BYTES = 4 << 20
"""The largest answer read: the simulated node's 12 GPUs expose 52 KB, 64 GPUs with
``--extended-metrics`` 383 KB; a larger answer is refused before it is parsed. Parsing
costs about 12 bytes of memory per byte of text: 4 MiB of series took ``top`` from 33 to 81
MiB of RSS (a 61 MB answer had cost 1.56 GB)."""
READ_DEADLINE = 5.0
"""Seconds one whole read may take, however slowly the server trickles its answer."""


class _Flight:
    """The one read of an :class:`Endpoint` that may be in progress, and where its answer
    will arrive: a read given up by its caller goes on (its thread cannot be stopped
    mid-``recv``), and the next call waits on it rather than starting another."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.answer: queue.SimpleQueue[str | OSError] = queue.SimpleQueue()


@dataclass(frozen=True)
class Endpoint:
    """A /metrics URL with what it takes to read it: basic auth from the URL's userinfo
    (kept out of every message), and the TLS choices of curl's ``--cacert`` / ``-k``.
    At most one read is in flight at a time, however slowly the server answers."""

    url: str
    ca_file: str | None = None
    insecure: bool = False
    timeout: float = 2.0
    _flight: _Flight = field(default_factory=_Flight, compare=False, repr=False)

    def read(self, until: float | None = None) -> str:
        """The exposition text, read within :data:`READ_DEADLINE` seconds and by ``until``
        (a ``time.monotonic()`` deadline); raises ``OSError`` with a one-line reason. The
        request runs on a daemon thread; when time is up it is left to finish (it gives up
        by itself :data:`READ_DEADLINE` plus one socket timeout after it began), and the
        next call waits for it instead of opening another connection."""
        limit = READ_DEADLINE if until is None else min(READ_DEADLINE, until - time.monotonic())
        if limit <= 0:
            raise OSError(f"{redact(self.url)}: out of time")
        flight = self._flight
        with flight.lock:
            if flight.thread is None or not flight.thread.is_alive():
                flight.answer = queue.SimpleQueue()  # an answer nobody waited for is stale
                flight.thread = threading.Thread(
                    target=self._fetch, args=(flight.answer,), name="top-read", daemon=True)
                flight.thread.start()
            answer = flight.answer
        try:
            got = answer.get(timeout=limit)
        except queue.Empty:
            raise OSError(f"{redact(self.url)}: no complete answer in {limit:.1f} s") from None
        if isinstance(got, OSError):
            raise got
        return got

    def _fetch(self, answer: queue.SimpleQueue[str | OSError]) -> None:
        try:
            answer.put(self._read(time.monotonic() + READ_DEADLINE))
        except OSError as exc:
            answer.put(exc)
        except Exception as exc:  # anything else the client raises: one line too
            answer.put(OSError(f"{redact(self.url)}: {type(exc).__name__}: {exc}"))

    def _read(self, stop: float) -> str:
        parts = urlsplit(self.url)
        plain = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        request = urllib.request.Request(plain, headers={"User-Agent": USER_AGENT})
        if parts.username is not None:
            pair = f"{parts.username}:{parts.password or ''}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(pair).decode())
        context = None
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=self.ca_file)
            if self.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        chunks: list[bytes] = []
        size = 0
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as r:
                while size <= MAX_BYTES:  # read1: what has arrived, not a full buffer
                    chunk = r.read1(min(64 * 1024, MAX_BYTES + 1 - size))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                    if time.monotonic() > stop:
                        raise OSError(f"{redact(self.url)}: no complete answer in "
                                      f"{READ_DEADLINE:.1f} s")
        except urllib.error.HTTPError as exc:
            raise OSError(f"{redact(self.url)} answered HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, urllib.error.URLError) \
                    and str(exc).startswith(redact(self.url)):
                raise
            reason = getattr(exc, "reason", exc)
            raise OSError(f"{redact(self.url)}: {reason}") from exc
        if size > MAX_BYTES:
            raise OSError(f"{redact(self.url)}: answer larger than {MAX_BYTES >> 20} MiB, "
                          "not an exposition this view reads")
        return b"".join(chunks).decode("utf-8", "replace")


AppFactory = Callable[[int], "web.Application"]
"""GPUs -> the simulated node's daemon as an aiohttp app (``exporter.cli.simulated_app``):
handed in, so the views never import the daemon they show."""


class SimulatedNode:
    """The simulated node's daemon on 127.0.0.1, an ephemeral port, in a background thread.

    Its logs are dropped (the terminal belongs to ``top``); ``stop()`` ends it."""

    def __init__(self, app: AppFactory, gpus: int = 12) -> None:
        self.app = app
        self.gpus = gpus
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="simulated-node", daemon=True)
        self._runner: object = None

    def start(self) -> str:
        self._thread.start()
        if not self._ready.wait(30):
            raise OSError("the simulated node did not start in 30 s")
        if self._failed is not None:
            raise OSError(f"the simulated node did not start: {self._failed}")
        return self.url

    def _run(self) -> None:
        try:
            self._serve()
        except Exception as exc:  # told to start(), which says it in one line
            self._failed = exc
            self._ready.set()

    def _serve(self) -> None:
        from aiohttp import web

        runner = web.AppRunner(self.app(self.gpus), access_log=None, shutdown_timeout=0.1)
        self._runner = runner
        asyncio.set_event_loop(self._loop)

        async def serve() -> None:
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            self.url = f"http://127.0.0.1:{port}/metrics"
            self._ready.set()

        self._loop.run_until_complete(serve())
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
