"""The HTTP endpoints, in-process over real HTTP (aiohttp test server on loopback)."""

from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient, TestServer
from exporter.metrics.render import ExpositionCache
from prometheus_client import CollectorRegistry

from exporter.config import build as build_settings
from exporter.daemon import build
from exporter.server import build_app
from exporter.snapshot import Device, SnapshotStore, SourceResult
from exporter.sources.nvml_session import NvmlSession


async def client_for(nvml, **flags) -> tuple[TestClient, object]:
    settings = build_settings({"simulate": True, "node_name": "node-a", **flags}, {})
    session = NvmlSession(nvml, "simulated")
    session.open()
    daemon = build(settings, session)
    client = TestClient(TestServer(daemon.app()))
    await client.start_server()
    return client, daemon


async def wait_ready(client: TestClient) -> None:
    for _ in range(100):
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
        assert len(state["inventory"]) == 8 and "nvml" in state["sources"]
        landing = await (await client.get("/")).text()
        assert 'href="metrics"' in landing
    finally:
        await client.close()


async def test_not_ready_with_reason_until_a_gpu_poll_succeeds():
    store = SnapshotStore("node-a", ready_sources=["nvml"])
    app = build_app(store, ExpositionCache(CollectorRegistry(), store), "simulated")
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
        store.publish(SourceResult(source="nvml", inventory=(Device("0", "GPU-x"),)))
        assert (await client.get("/readyz")).status == 200
    finally:
        await client.close()
