"""Where ``top`` reads the exposition from: a running daemon over HTTP(S), or a simulated
node started in this process (``top --simulate``), served on a loopback port so both read
through the same HTTP path a scraper uses."""

from __future__ import annotations

import asyncio
import base64
import ssl
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from exporter.urls import redact

USER_AGENT = "gpu-goodput-exporter-top"
MAX_BYTES = 64 << 20
"""A daemon's exposition is tens of kilobytes; anything near this is not one."""


@dataclass(frozen=True)
class Endpoint:
    """A /metrics URL with what it takes to read it: basic auth from the URL's userinfo
    (kept out of every message), and the TLS choices of curl's ``--cacert`` / ``-k``."""

    url: str
    ca_file: str | None = None
    insecure: bool = False
    timeout: float = 2.0

    def read(self) -> str:
        """The exposition text; raises ``OSError`` with a one-line reason."""
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
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as r:
                body: bytes = r.read(MAX_BYTES)
        except urllib.error.HTTPError as exc:
            raise OSError(f"{redact(self.url)} answered HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise OSError(f"{redact(self.url)}: {reason}") from exc
        return body.decode("utf-8", "replace")


class SimulatedNode:
    """The simulated node's daemon on 127.0.0.1, an ephemeral port, in a background thread.

    Its logs are dropped (the terminal belongs to ``top``); ``stop()`` ends it."""

    def __init__(self, gpus: int = 12) -> None:
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

        from exporter.config import build
        from exporter.daemon import build as build_daemon
        from exporter.daemon import open_nvml

        settings = build({"simulate": True, "simulate_gpus": self.gpus, "log_level": "error"})
        daemon = build_daemon(settings, open_nvml(settings))
        runner = web.AppRunner(daemon.app(), access_log=None, shutdown_timeout=0.1)
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
