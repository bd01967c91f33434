"""SIGHUP: read the config file and the web config again and apply them, as Prometheus
does. A new configuration that does not validate is refused with one log line and the
running one stays; the outcome is published as
``goodput_exporter_config_last_reload_successful`` (and the time of the last success).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from exporter import collectors
from exporter.process import logsummary
from exporter.web import webconfig
from exporter.wiring.config import ConfigError, Settings, build
from exporter.wiring.daemon import Daemon

log = structlog.get_logger("reload")

def needs_restart(old: Settings, new: Settings) -> list[str]:
    """The settings that changed but only take effect at a restart: every key but those a
    collector takes live (``Collector.live``, handed over by ``Daemon.apply``)."""
    live = {c.section: c.live for c in collectors.REGISTRY if c.section and c.reconfigure}
    before, after = old.model_dump(), new.model_dump()
    restart = [k for k, v in after.items() if k not in live and v != before[k]]
    for section, keys in live.items():
        restart += [
            f"{section}.{key}"
            for key, value in after[section].items()
            if key not in keys and value != before[section][key]
        ]
    return restart


class WebLayer:
    """The web config's middlewares behind one fixed middleware, so a reload can swap them
    on a running server. TLS stays as started (the listening socket holds its context;
    certificate files are already re-read when they change)."""

    def __init__(self, config: webconfig.WebConfig) -> None:
        self.config = config

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        chain = handler
        for layer in reversed(self.config.middlewares):
            chain = _bind(layer, chain)
        return await chain(request)


def _bind(layer: Any, nxt: Handler) -> Handler:
    async def call(request: web.Request) -> web.StreamResponse:
        response: web.StreamResponse = await layer(request, nxt)
        return response

    return call


class Reloader:
    """Runs on SIGHUP: :meth:`run` reads and validates the files on a worker thread (a
    large or hostile file never blocks /metrics), then applies them on the event loop.
    Calling the object does both at once (tests). Every failure, whatever the file holds,
    is one ``config_reload_failed`` line and the reload gauge at 0."""

    def __init__(
        self,
        daemon: Daemon,
        flags: Mapping[str, Any],
        config_file: str | None,
        web_config_file: str | None,
        web: WebLayer,
    ) -> None:
        self.daemon = daemon
        self.flags = flags
        self.config_file = config_file
        self.web_config_file = web_config_file
        self.web = web
        self._lock: asyncio.Lock | None = None

    def read(self) -> tuple[Settings, webconfig.WebConfig] | str:
        """The new settings and web config, or the one-line reason they are refused."""
        try:
            return (
                build(self.flags, os.environ, self.config_file),
                webconfig.load(self.web_config_file),
            )
        except (ConfigError, webconfig.WebConfigError) as exc:
            return str(exc)
        except Exception as exc:
            return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"

    async def run(self) -> bool:
        """Read off the event loop, apply on it; one reload at a time."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            return self.apply(await asyncio.to_thread(self.read))

    def __call__(self) -> bool:
        return self.apply(self.read())

    def apply(self, read: tuple[Settings, webconfig.WebConfig] | str) -> bool:
        metrics = self.daemon.scheduler.metrics
        if isinstance(read, str):
            log.error("config_reload_failed", error=read, effect="the running configuration stays")
            running_auth = self.web.config.basic_auth
            if running_auth is not None:  # the same bad file is not reported again
                running_auth.acknowledge_file()
            metrics.reloaded(False)
            return False
        settings, web_config = read
        if web_config.basic_auth is not None:  # failed logins keep being counted
            web_config.basic_auth.on_failure = metrics.count_auth_failures(
                webconfig.FAILURE_REASONS
            )
        restart = needs_restart(self.daemon.settings, settings)
        self.daemon.apply(settings)
        if (web_config.ssl_context is None) != (self.web.config.ssl_context is None):
            restart.append("tls_server_config")
        self.web.config = web_config
        metrics.reloaded(True)
        # Refusals not yet summarized go in the log before the line that accepts.
        logsummary.SUMMARIES.flush("config_reload_failed")
        log.info(
            "config_reloaded",
            config_file=self.config_file,
            web_config_file=self.web_config_file,
            **collectors.words(settings),
        )
        if restart:
            log.warning(
                "config_reload_needs_restart",
                settings=sorted(restart),
                effect="these changes take effect at the next start",
            )
        return True
