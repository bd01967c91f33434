"""The issue's acceptance check, in-process: the simulated daemon plus the serving source.

``--simulate --config`` with a vLLM-style target on GPU "0" and a garbage target on GPU
"1": generation tokens of GPU 0 advance on /metrics, the garbage target is down while the
daemon keeps serving, and killing the live engine turns its ``up`` to 0 within 15 s.
The daemon is built by exporter.wiring.daemon exactly as the CLI does, serving source included.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from exporter.sim.fake_engine import FakeEngine, serve
from exporter.sources.nvml_session import NvmlSession
from exporter.wiring.config import build
from exporter.wiring.daemon import build as build_daemon
from tests.support.serving import start

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(session: aiohttp.ClientSession, url: str) -> Series:
    async with session.get(url) as resp:
        assert resp.status == 200
        text = await resp.text()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def find(series: Series, name: str, **match: str) -> float | None:
    for (sample_name, labels), value in series.items():
        if sample_name == name and set(match.items()) <= labels:
            return value
    return None


async def until(check: Callable[[], Awaitable[bool]], timeout: float) -> float:
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not true within {timeout}s")
        await asyncio.sleep(0.1)
    return time.monotonic() - started


@pytest.mark.integration
async def test_simulated_node_with_live_and_garbage_engines(tmp_path: Path) -> None:
    engine_runner = await serve(FakeEngine(model="sim/llama", generation_rate=500.0))
    engine_url = f"http://127.0.0.1:{engine_runner.addresses[0][1]}/metrics"

    async def garbage(_: web.Request) -> web.Response:
        return web.Response(body=os.urandom(2048))

    app = web.Application()
    app.router.add_get("/metrics", garbage)
    garbage_runner, garbage_base = await start(app)
    garbage_url = f"{garbage_base}/metrics"

    config = tmp_path / "config.yaml"
    config.write_text(
        "serving:\n"
        "  interval: 0.5\n"
        "  timeout: 1\n"
        "  targets:\n"
        f"    - {{url: '{engine_url}', gpus: ['0']}}\n"
        f"    - {{url: '{garbage_url}', gpus: ['1']}}\n"
    )
    settings = build({"simulate": True, "interval": 0.5}, environ={}, config_file=str(config))
    daemon = build_daemon(settings, NvmlSession.open_for(settings))
    # exporter.wiring.daemon.build wires the serving source itself, as the CLI runs it:
    # exactly one.
    assert [s.name for s in daemon.scheduler.sources].count("serving") == 1
    runner = web.AppRunner(daemon.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    metrics_url = f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
    tokens = "goodput_gpu_tokens_total"
    try:
        async with aiohttp.ClientSession() as session:
            first: list[float] = []

            async def tokens_seen() -> bool:
                value = find(await scrape(session, metrics_url), tokens, gpu="0",
                             kind="generation", model="sim/llama", engine="vllm")
                if value is not None:
                    first.append(value)
                return len(first) >= 2 and first[-1] > first[0]

            await until(tokens_seen, timeout=10)
            now = await scrape(session, metrics_url)
            assert find(now, "goodput_serving_target_up", target=engine_url, engine="vllm") == 1.0
            assert find(now, "goodput_serving_target_up", target=garbage_url) == 0.0
            assert find(now, "goodput_serving_target_error_info", target=garbage_url,
                        reason="bad_encoding") == 1.0
            assert find(now, "goodput_gpu_utilization_ratio", gpu="1") is not None  # still serving

            await engine_runner.cleanup()  # kill the live engine

            async def engine_down() -> bool:
                series = await scrape(session, metrics_url)
                return find(series, "goodput_serving_target_up", target=engine_url) == 0.0

            assert await until(engine_down, timeout=15) < 15
            after = await scrape(session, metrics_url)
            kept = find(after, tokens, gpu="0", kind="generation")
            assert kept is not None and kept >= first[-1]  # the counter never goes backwards
    finally:
        await runner.cleanup()
        await garbage_runner.cleanup()
        await engine_runner.cleanup()
