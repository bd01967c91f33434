"""Configuration reload (SIGHUP) in-process: what a reload changes on a running daemon.

The signal itself, a refused config and target series going away are driven through a real
daemon subprocess in tests/test_fault_battery.py; these cases need the daemon's insides.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import bcrypt
from aiohttp import web
from structlog.testing import capture_logs

from exporter.web import webconfig
from exporter.wiring import config
from exporter.wiring.daemon import Daemon, build
from exporter.wiring.reload import Reloader, WebLayer
from tests.support.prometheus import free_port
from tests.support.serving import start, vllm_text
from tests.test_fault_battery import node, samples, value


@contextlib.asynccontextmanager
async def serving(daemon: Daemon, layer: WebLayer) -> AsyncIterator[str]:
    runner = web.AppRunner(daemon.app(middlewares=[layer.middleware]))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def users(tmp_path: Path, name: str) -> Path:
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4)).decode()
    path = tmp_path / "web.yaml"
    path.write_text(f"basic_auth_users:\n  {name}: '{hashed}'\n")
    return path


async def test_a_reload_starts_serving_targets_where_none_ran_and_keeps_counting_logins(
    tmp_path: Path,
) -> None:
    engine_app = web.Application()
    engine_app.router.add_get("/metrics", _ok)
    engine, base = await start(engine_app)
    cfg = tmp_path / "config.yaml"
    cfg.write_text("interval: 0.2\n")
    flags = {"node_name": "reloaded"}
    daemon = build(config.build(flags, environ={}, config_file=str(cfg)), node(None))
    web_file = users(tmp_path, "alice")
    layer = WebLayer(webconfig.load(web_file))
    reload = Reloader(daemon, flags, str(cfg), str(web_file), layer)
    bob = {"Authorization": "Basic " + base64.b64encode(b"bob:right").decode()}
    try:
        async with serving(daemon, layer) as url, aiohttp.ClientSession() as http:
            async with http.get(url + "/metrics", headers=bob) as resp:
                assert resp.status == 401  # bob is not a user yet
            assert not [s for s in daemon.sources if s.name == "serving"]

            cfg.write_text(
                f"interval: 0.2\nlog_level: debug\nserving:\n  interval: 0.2\n"
                f"  targets:\n  - url: {base}/metrics\n    gpus: ['0']\n"
            )
            users(tmp_path, "bob")
            with capture_logs() as logs:
                assert reload()
            restart = [e for e in logs if e["event"] == "config_reload_needs_restart"]
            assert restart and restart[0]["settings"] == ["log_level"]

            async def scrape_as_bob() -> str:
                async with http.get(url + "/metrics", headers=bob) as resp:
                    assert resp.status == 200
                    return await resp.text()

            found = samples(await scrape_as_bob())
            assert value(found, "goodput_exporter_config_last_reload_successful") == 1.0
            for _ in range(100):  # the new serving source polls within a few rounds
                found = samples(await scrape_as_bob())
                tokens = value(found, "goodput_gpu_tokens_total", gpu="0", kind="generation")
                if tokens is not None:
                    break
                await asyncio.sleep(0.1)
            assert tokens == 42.0
            async with http.get(url + "/metrics") as resp:
                assert resp.status == 401  # no credentials: counted by the new users' guard
            found = samples(await scrape_as_bob())
            assert value(found, "goodput_exporter_http_auth_failures_total",
                         reason="missing") == 1.0
    finally:
        await engine.cleanup()


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text=vllm_text(42.0))
