"""Misbehaving and healthy serving engines on loopback, and helpers to read results."""

from __future__ import annotations

import asyncio
import http.server
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from exporter.metrics.encode import Encoder
from exporter.metrics.families import erase
from exporter.readings import Device, PodAssignments, ProcessInfo
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.serving.config import ServingConfig
from exporter.sources.serving.families import GPU, NODE
from exporter.sources.serving.source import ServingSource
from exporter.sources.serving.targets import Target, TargetSet, static_targets

HUGE_BYTES = 50 * 1024 * 1024


class ThreadEngine:
    """An engine on a loopback thread for tests that drive a daemon subprocess (no event
    loop of their own): ``body(n)`` gives the text of the n-th scrape (from 0), and
    ``queries`` records each request's path."""

    def __init__(self, body: Callable[[int], str]) -> None:
        engine = self
        self.queries: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                engine.queries.append(self.path)
                data = body(len(engine.queries) - 1).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def vllm_text(generation: float, prompt: float = 0.0, model: str = "m") -> str:
    return (
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{engine="0",model_name="{model}"}} {generation}\n'
        "# TYPE vllm:prompt_tokens_total counter\n"
        f'vllm:prompt_tokens_total{{engine="0",model_name="{model}"}} {prompt}\n'
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="{model}"}} 3\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="{model}"}} 0.25\n'
    )


@dataclass
class Zoo:
    """State of the misbehaving server: what /ok serves, how much /huge managed to send."""

    generation: float = 100.0
    huge_sent: int = 0
    drip_sent: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)


def zoo_app(zoo: Zoo) -> web.Application:
    async def ok(_: web.Request) -> web.Response:
        return web.Response(text=vllm_text(zoo.generation))

    async def hang(_: web.Request) -> web.Response:
        await zoo.done.wait()
        return web.Response(text="")

    async def drip(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for line in vllm_text(1.0).splitlines(keepends=True) * 1000:
            if zoo.done.is_set():
                break
            await resp.write(line.encode())
            zoo.drip_sent += 1
            await asyncio.sleep(0.05)
        return resp

    async def error(_: web.Request) -> web.Response:
        return web.Response(status=500, text="internal error")

    async def garbage(_: web.Request) -> web.Response:
        return web.Response(body=os.urandom(4096), content_type="application/octet-stream")

    async def truncated(_: web.Request) -> web.Response:
        text = vllm_text(5.0)
        return web.Response(text=text[: text.index("vllm:prompt_tokens_total{") + 30])

    async def huge(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        chunk = b"# " + b"x" * (1024 * 1024 - 3) + b"\n"
        try:
            while zoo.huge_sent < HUGE_BYTES:
                await resp.write(chunk)
                zoo.huge_sent += len(chunk)
        except (ConnectionError, RuntimeError):
            pass
        return resp

    app = web.Application()
    for path, handler in (
        ("/ok", ok), ("/hang", hang), ("/drip", drip), ("/500", error),
        ("/garbage", garbage), ("/truncated", truncated), ("/huge", huge),
    ):
        app.router.add_get(path, handler)
    return app


async def start(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on a free loopback port; returns the runner and its base URL."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


def inventory(gpus: int = 4) -> tuple[Device, ...]:
    """An NVML-like inventory of ``gpus`` devices (gpu i, uuid GPU-i)."""
    return tuple(Device(str(i), f"GPU-{i}") for i in range(gpus))


def make_source(
    config: ServingConfig,
    *,
    targets: Iterable[Target] | None = None,
    gpus: int = 4,
    processes: Iterable[ProcessInfo] = (),
    pods: PodAssignments | None = None,
    proc_root: Path = Path("/proc"),
) -> ServingSource:
    """A serving source over fixed views, as collectors.py wires it over the store."""
    devices, procs = inventory(gpus), tuple(processes)
    found = TargetSet(static_targets(config) if targets is None else targets)
    return ServingSource(
        config, found, inventory=lambda: devices, processes=lambda: procs,
        pods=lambda: pods or PodAssignments(), proc_root=proc_root,
    )


TOKENS = "goodput_gpu_tokens_total"
REQUESTS = "goodput_gpu_serving_requests"
KV_CACHE = "goodput_gpu_kv_cache_usage_ratio"
FLOPS = "goodput_gpu_serving_flops_total"
PREEMPTIONS = "goodput_gpu_serving_preemptions_total"
BUSY = "goodput_gpu_serving_busy_seconds_total"
TARGET_UP = "goodput_serving_target_up"
SCRAPE_DURATION = "goodput_serving_scrape_duration_seconds"
TARGET_ERROR = "goodput_serving_target_error_info"
TARGET_GPUS = "goodput_serving_target_gpus"
DISCOVERY_UP = "goodput_serving_discovery_up"

Series = list[tuple[str, dict[str, str], float]]


def exposition(result: SourceResult) -> Series:
    """What /metrics shows for ``result``: its readings rendered by the serving families."""
    store = SnapshotStore("test-node")
    store.publish(result)
    body = Encoder([erase(GPU), erase(NODE)]).encode(store.current).decode()
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(body)
        for s in family.samples
    ]


def metric(result: SourceResult, name: str, **match: str) -> float | None:
    """The value of the one series of ``name`` whose labels include ``match``."""
    found = [v for n, labels, v in exposition(result)
             if n == name and set(match.items()) <= set(labels.items())]
    assert len(found) <= 1, f"{len(found)} series of {name} match {match}"
    return found[0] if found else None


def series(result: SourceResult, name: str) -> list[dict[str, str]]:
    return [labels for n, labels, _ in exposition(result) if n == name]
