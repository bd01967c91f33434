"""Every way a scrape fails shows as goodput_serving_target_error_info{target,reason} on
that target alone, with target_up 0, one source error and one log line naming both."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from exporter.sources.serving.config import ServingConfig, ServingTarget
from tests.support import serving
from tests.support.serving import TARGET_ERROR, TARGET_UP, Zoo, metric, series, zoo_app

CASES = {
    "/hang": "timeout",
    "/refused": "connection_refused",
    "/500": "http_500",
    "/garbage": "bad_encoding",
    "/truncated": "parse_error",
    "/huge": "body_too_large",
    "/401": "unauthorized",
    "/403": "unauthorized",
    "/trickle": "timeout",  # one byte at a time: the whole scrape is bounded, not each read
    "/reset": "http_error",  # the connection is torn down mid-answer
}


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def zoo() -> AsyncIterator[str]:
    state = Zoo()
    app = zoo_app(state)

    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=int(request.path.strip("/")), text="no")

    async def trickle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for byte in b"vllm:num_requests_running 1\n" * 4:
            await resp.write(bytes([byte]))
            await asyncio.sleep(0.1)
        return resp

    async def reset(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Length": "1000"})
        await resp.prepare(request)
        await resp.write(b"vllm:num_requests_running 1\n")
        assert request.transport is not None
        request.transport.abort()
        return resp

    app.router.add_get("/401", refuse)
    app.router.add_get("/403", refuse)
    app.router.add_get("/trickle", trickle)
    app.router.add_get("/reset", reset)
    runner, base = await serving.start(app)
    yield base
    state.done.set()
    await runner.cleanup()


@pytest.mark.parametrize(("path", "reason"), list(CASES.items()))
async def test_each_failure_has_its_reason_on_its_target(
    zoo: str, path: str, reason: str
) -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics" if path == "/refused" else zoo + path
    healthy = f"{zoo}/ok"
    config = ServingConfig(
        targets=[ServingTarget(url=url, gpus=["1"]), ServingTarget(url=healthy, gpus=["0"])],
        timeout=0.5, max_body_bytes=1024 * 1024,
    )
    source = serving.make_source(config)
    try:
        with capture_logs() as logs:
            result = await source.poll()
    finally:
        await source.close()
    assert metric(result, TARGET_UP, target=url) == 0.0
    assert metric(result, TARGET_ERROR, target=url, reason=reason) == 1.0
    assert series(result, TARGET_ERROR) == [{"node": "test-node", "target": url,
                                             "reason": reason}]
    assert metric(result, TARGET_UP, target=healthy) == 1.0
    assert result.errors == {reason: 1}
    downs = [(e["target"], e["reason"]) for e in logs if e["event"] == "serving_target_down"]
    assert downs == [(url, reason)]
