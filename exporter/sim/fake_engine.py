"""A tiny stand-in for a vLLM V1 server's ``/metrics``, for the simulated node and tests.

Its token counters grow at configured rates from the moment it starts, rendered by
prometheus-client like vLLM's own (``_total`` and ``_created`` series, ``model_name`` and
``engine`` labels), so the serving source sees what it would see from a real engine.
Run one: ``python -m exporter.sim.fake_engine --port 8000 --rate 250``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector


@dataclass(eq=False)
class FakeEngine(Collector):
    """Counters as functions of time since ``started``; ``restart()`` zeroes them."""

    model: str = "sim/llama-3-8b"
    generation_rate: float = 250.0
    prompt_rate: float = 1000.0
    running: int = 8
    waiting: int = 2
    kv_usage: float = 0.42
    started: float = field(default_factory=time.time)

    def restart(self) -> None:
        self.started = time.time()

    def collect(self) -> Iterator[Metric]:
        up = max(time.time() - self.started, 0.0)
        names = ["model_name", "engine"]
        values = [self.model, "0"]
        for name, doc, value in (
            ("vllm:num_requests_running", "Requests in the running batch.", self.running),
            ("vllm:num_requests_waiting", "Requests waiting.", self.waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage, 1 means 100 percent.", self.kv_usage),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=names)
            gauge.add_metric(values, value)
            yield gauge
        for name, doc, rate in (
            ("vllm:prompt_tokens", "Prefill tokens processed.", self.prompt_rate),
            ("vllm:generation_tokens", "Generation tokens processed.", self.generation_rate),
            ("vllm:num_preemptions", "Cumulative preemptions.", 0.0),
        ):
            counter = CounterMetricFamily(name, doc, labels=names)
            counter.add_metric(values, float(int(rate * up)), created=self.started)
            yield counter


def make_app(engine: FakeEngine) -> web.Application:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(engine)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), content_type="text/plain", charset="utf-8"
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


async def serve(engine: FakeEngine, host: str = "127.0.0.1", port: int = 0) -> web.AppRunner:
    """Start serving; the bound port is ``runner.addresses[0][1]``. Stop with cleanup()."""
    runner = web.AppRunner(make_app(engine), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="fake vLLM /metrics endpoint")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="sim/llama-3-8b")
    parser.add_argument("--rate", type=float, default=250.0, help="generation tokens/s")
    parser.add_argument("--prompt-rate", type=float, default=1000.0, help="prompt tokens/s")
    args = parser.parse_args(argv)

    async def run() -> None:
        engine = FakeEngine(args.model, args.rate, prompt_rate=args.prompt_rate)
        runner = await serve(engine, args.host, args.port)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    asyncio.run(run())


if __name__ == "__main__":
    main()
