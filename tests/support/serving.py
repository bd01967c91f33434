"""Misbehaving and healthy serving engines on loopback, and helpers to read results."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiohttp import web

from exporter.snapshot import Device, ProcessInfo, Sample, SnapshotStore, SourceResult

HUGE_BYTES = 50 * 1024 * 1024


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


def gpu_store(gpus: int = 4, processes: Iterable[ProcessInfo] = ()) -> SnapshotStore:
    """A store holding an NVML-like inventory of ``gpus`` devices (gpu i, uuid GPU-i)."""
    store = SnapshotStore("test-node")
    store.publish(SourceResult(
        source="nvml",
        inventory=tuple(Device(str(i), f"GPU-{i}") for i in range(gpus)),
        processes=tuple(processes),
    ))
    return store


def node_value(result: SourceResult, name: str, **match: str) -> float | None:
    for sample in result.node:
        if sample.name == name and set(match.items()) <= set(sample.labels):
            return sample.value
    return None


def node_samples(result: SourceResult, name: str) -> list[Sample]:
    return [s for s in result.node if s.name == name]


def device_value(result: SourceResult, gpu: str, name: str, **match: str) -> float | None:
    for sample in result.devices.get(gpu, ()):
        if sample.name == name and set(match.items()) <= set(sample.labels):
            return sample.value
    return None
