"""The HTTP endpoints, in-process over real HTTP (aiohttp test server on loopback)."""

from __future__ import annotations

import asyncio
import gzip

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporter import collectors
from exporter.metrics.cache import ExpositionCache
from exporter.metrics.encode import Encoder
from exporter.readings import Device, GpuState, NvmlReading
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.nvml_session import NvmlSession
from exporter.web.server import build_app
from exporter.wiring.config import Settings
from exporter.wiring.config import build as build_settings
from exporter.wiring.daemon import build


async def client_for(nvml, **flags) -> tuple[TestClient, object]:
    settings = build_settings({"simulate": True, "node_name": "node-a", **flags}, {})
    session = NvmlSession(nvml, "simulated")
    session.open()
    daemon = build(settings, session)
    client = TestClient(TestServer(daemon.app()))
    await client.start_server()
    return client, daemon


async def wait_ready(client: TestClient) -> None:
    for _ in range(200):
        if (await client.get("/readyz")).status == 200:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("never ready")


async def test_endpoints(sim):
    client, _ = await client_for(sim)
    try:
        assert (await client.get("/healthz")).status == 200
        await wait_ready(client)
        resp = await client.get("/metrics")
        text = await resp.text()
        assert resp.headers["Content-Type"].startswith("text/plain")
        assert 'goodput_exporter_build_info{backend="simulated"' in text
        assert 'goodput_gpu_up{gpu="5",node="node-a"' in text
        om = await client.get("/metrics", headers={"Accept": "application/openmetrics-text"})
        assert om.headers["Content-Type"].startswith("application/openmetrics-text")
        assert (await om.text()).rstrip().endswith("# EOF")
        state = await (await client.get("/debug/state")).json()
        assert state["node"] == "node-a" and "nvml" in state["sources"]
        assert len(state["sources"]["nvml"]["inventory"]) == 8
        landing = await (await client.get("/")).text()
        assert 'href="metrics"' in landing
    finally:
        await client.close()


async def test_gzip_is_honoured_and_the_same_exposition(sim):
    client, _ = await client_for(sim)
    try:
        await wait_ready(client)
        zipped = await client.get("/metrics", headers={"Accept-Encoding": "gzip"},
                                  auto_decompress=False)
        assert zipped.headers["Content-Encoding"] == "gzip"
        assert "Accept-Encoding" in zipped.headers["Vary"]
        body = gzip.decompress(await zipped.read()).decode()
        assert 'goodput_gpu_up{gpu="0",node="node-a"' in body
        plain = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        assert "Content-Encoding" not in plain.headers
    finally:
        await client.close()


async def test_debug_state_can_be_switched_off(sim):
    client, _ = await client_for(sim, debug_state=False)
    try:
        assert (await client.get("/debug/state")).status == 404
        assert (await client.get("/healthz")).status == 200
    finally:
        await client.close()


def _bare(store: SnapshotStore) -> ExpositionCache:
    settings = Settings(simulate=True)
    encoder = Encoder(collectors.families(collectors.REGISTRY, settings),
                      CollectorRegistry(auto_describe=False))
    cache = ExpositionCache(encoder, lambda: store.current)
    store.subscribe(cache.published)
    return cache


async def test_not_ready_with_reason_until_a_gpu_poll_succeeds():
    store = SnapshotStore("node-a", ready_sources=["nvml"])
    app = build_app(store, _bare(store), "simulated")
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        resp = await client.get("/readyz")
        assert resp.status == 503
        assert "no GPU source" in await resp.text()
        store.publish(
            SourceResult(
                source="nvml", ok=False, reason="nvml_unavailable", error="NVML init failed"
            )
        )
        assert "NVML init failed" in await (await client.get("/readyz")).text()
        store.publish(SourceResult(source="nvml", reading=NvmlReading((Device("0", "GPU-x"),))))
        assert (await client.get("/readyz")).status == 200
    finally:
        await client.close()


async def test_concurrent_scrapes_during_publishes_are_always_complete():
    """Scrapes racing a publisher that swaps snapshots as fast as it can: every body parses
    and holds one consistent snapshot (all GPUs of one poll, never a torn mix)."""
    store = SnapshotStore("node-a", ready_sources=["nvml"])
    cache = _bare(store)
    cache.start()
    devices = tuple(Device(str(i), f"GPU-{i}") for i in range(8))
    stop = asyncio.Event()

    async def publisher() -> int:
        n = 0
        while not stop.is_set():
            n += 1
            state = GpuState(utilization=(n % 100) / 100, power_watts=float(n))
            reading = NvmlReading(devices, {d.gpu: state for d in devices})
            store.publish(SourceResult(source="nvml", reading=reading))
            await asyncio.sleep(0)
        return n

    client = TestClient(TestServer(build_app(store, cache, "simulated")))
    await client.start_server()
    try:
        task = asyncio.create_task(publisher())

        async def scrape() -> None:
            for _ in range(10):
                text = await (await client.get("/metrics")).text()
                powers = {
                    s.value
                    for f in text_string_to_metric_families(text)
                    for s in f.samples
                    if s.name == "goodput_gpu_power_watts"
                }
                assert len(powers) <= 1, powers  # one snapshot per body

        await asyncio.gather(*(scrape() for _ in range(20)))
        stop.set()
        assert await task > 0
    finally:
        await client.close()
        cache.stop()


VARIANTS = [
    ({"Accept-Encoding": "identity"}, False, False),
    ({"Accept-Encoding": "gzip"}, False, True),
    ({"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "identity"},
     True, False),
    ({"Accept": "application/openmetrics-text", "Accept-Encoding": "gzip, deflate"}, True, True),
]


async def test_every_variant_is_complete_and_parseable_while_publishing():
    """All four variants (text or OpenMetrics, plain or gzip) scraped at once while snapshots
    are swapped: each body decodes, parses with prometheus-client's parser for its format,
    ends where its format says and holds the power of one poll only."""
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )

    store = SnapshotStore("node-a", ready_sources=["nvml"])
    cache = _bare(store)
    cache.start()
    devices = tuple(Device(str(i), f"GPU-{i}") for i in range(4))
    stop = asyncio.Event()

    async def publisher() -> int:
        n = 0
        while not stop.is_set():
            n += 1
            state = GpuState(power_watts=float(n), energy_joules=float(n * 10))
            reading = NvmlReading(devices, {d.gpu: state for d in devices})
            store.publish(SourceResult(source="nvml", reading=reading))
            await asyncio.sleep(0)
        return n

    client = TestClient(TestServer(build_app(store, cache, "simulated")))
    await client.start_server()
    task = asyncio.create_task(publisher())
    try:
        async def scrape(headers: dict[str, str], openmetrics: bool, gzipped: bool) -> None:
            for _ in range(8):
                resp = await client.get("/metrics", headers=headers, auto_decompress=False)
                assert resp.status == 200
                raw = await resp.read()
                assert (resp.headers.get("Content-Encoding") == "gzip") is gzipped
                text = (gzip.decompress(raw) if gzipped else raw).decode()
                kind = resp.headers["Content-Type"]
                assert kind.startswith("application/openmetrics-text" if openmetrics
                                       else "text/plain")
                parse = openmetrics_families if openmetrics else text_string_to_metric_families
                fams = list(parse(text))
                powers = {s.value for f in fams for s in f.samples
                          if s.name == "goodput_gpu_power_watts"}
                assert len(powers) == 1, powers
                if openmetrics:
                    assert text.endswith("# EOF\n") and text.count("# EOF") == 1

        await asyncio.gather(*(scrape(*v) for v in VARIANTS for _ in range(3)))
    finally:
        stop.set()
        assert await task > 0
        await client.close()
        cache.stop()


def test_observers_see_each_encode_of_the_text_body() -> None:
    """The landing page keeps its rates' samples from here: one call per encode, with the
    plain text body a scrape gets, whatever other variants are kept warm."""
    from exporter.metrics.cache import Variant

    store = SnapshotStore("node-a")
    cache = _bare(store)
    seen: list[tuple[float, bytes]] = []
    cache.observe(lambda now, body: seen.append((now, body)))
    cache.cached(Variant(openmetrics=True, gzipped=True))  # a second variant kept warm
    cache.refresh()
    store.publish(SourceResult(source="nvml", reading=NvmlReading((Device("0", "GPU-x"),))))
    cache.refresh()
    assert len(seen) == 2 and seen[-1][1] is cache.body(Variant())
    assert b'goodput_gpu_info{gpu="0"' in seen[-1][1] and seen[0][1] != seen[-1][1]
