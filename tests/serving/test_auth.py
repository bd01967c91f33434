"""Targets behind authentication and TLS, against real servers on loopback.

A token or password is sent to the engine and shown nowhere else: not in labels, logs,
errors, /debug/state or the config's repr. Rotated files are read again without a restart.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from exporter.metrics.encode import Encoder
from exporter.metrics.families import erase
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.serving.config import ServingConfig, ServingTarget
from exporter.sources.serving.families import GPU, NODE
from exporter.wiring.config import ConfigError, build
from tests.support import serving
from tests.support.serving import TARGET_ERROR, TARGET_UP, TOKENS, metric, vllm_text

pytest.importorskip("cryptography")
from tests.support.pki import Pki, make_pki

PASSWORD = "pw-Zq8s7-never-shown"
TOKEN = "tok-Hn3k2-never-shown"


@dataclass
class Guard:
    """The Authorization header the engine accepts; anything else gets 401."""

    expected: str = ""
    seen: int = 0


def guarded_app(guard: Guard) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        guard.seen += 1
        if guard.expected and request.headers.get("Authorization") != guard.expected:
            return web.Response(status=401, text="unauthorized")
        return web.Response(text=vllm_text(100.0))

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


async def start_tls(app: web.Application, ctx: ssl.SSLContext) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    return runner, runner.addresses[0][1]


@pytest.fixture
async def engine() -> AsyncIterator[tuple[Guard, str]]:
    guard = Guard()
    runner, base = await serving.start(guarded_app(guard))
    yield guard, f"{base}/metrics"
    await runner.cleanup()


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


def bearer(token: str) -> str:
    return f"Bearer {token}"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def poll(target: dict[str, Any]) -> SourceResult:
    config = ServingConfig(targets=[ServingTarget(**{"gpus": ["0"], **target})], timeout=2)
    source = serving.make_source(config)
    try:
        return await source.poll()
    finally:
        await source.close()


def metrics_text(result: SourceResult) -> str:
    store = SnapshotStore("test-node")
    store.publish(result)
    return Encoder([erase(GPU), erase(NODE)]).encode(store.current).decode()


def debug_state(result: SourceResult) -> str:
    store = SnapshotStore("test-node")
    store.publish(result)
    return json.dumps(store.current.to_json(), default=str)


def touch_later(path: Path, text: str) -> None:
    """Rewrite ``path`` with an mtime surely different from before (coarse filesystems)."""
    before = path.stat().st_mtime if path.exists() else 0.0
    path.write_text(text)
    os.utime(path, (before + 2, before + 2))


async def test_bearer_token_inline(engine: tuple[Guard, str]) -> None:
    guard, url = engine
    guard.expected = bearer(TOKEN)
    result = await poll({"url": url, "authorization": {"credentials": TOKEN}})
    assert metric(result, TARGET_UP, target=url) == 1.0
    assert metric(result, TOKENS, gpu="0", kind="generation", model="m", engine="vllm") == 100.0


async def test_rotated_token_file_is_read_again(engine: tuple[Guard, str], tmp_path: Path) -> None:
    guard, url = engine
    token = tmp_path / "token"
    token.write_text("first\n")
    guard.expected = bearer("first")
    config = ServingConfig(targets=[ServingTarget(
        url=url, gpus=["0"], authorization={"credentials_file": str(token)})])
    source = serving.make_source(config)
    try:
        assert metric(await source.poll(), TARGET_UP, target=url) == 1.0
        guard.expected = bearer("second")  # the engine rotated: the old token is refused
        result = await source.poll()
        assert metric(result, TARGET_UP, target=url) == 0.0
        assert metric(result, TARGET_ERROR, target=url, reason="unauthorized") == 1.0
        touch_later(token, "second\n")  # the secret store caught up
        assert metric(await source.poll(), TARGET_UP, target=url) == 1.0
        token.unlink()
        result = await source.poll()
        assert metric(result, TARGET_ERROR, target=url, reason="credentials_unreadable") == 1.0
    finally:
        await source.close()


async def test_wrong_password_is_unauthorized_and_never_shown(
    engine: tuple[Guard, str], tmp_path: Path
) -> None:
    guard, url = engine
    guard.expected = basic("scraper", "the-right-one")
    inline = {"url": url, "basic_auth": {"username": "scraper", "password": PASSWORD}}
    secret_file = tmp_path / "password"
    secret_file.write_text(PASSWORD)
    from_file = {"url": url, "basic_auth": {"username": "scraper",
                                            "password_file": str(secret_file)}}
    for target in (inline, from_file):
        with capture_logs() as logs:
            result = await poll(target)
        assert metric(result, TARGET_UP, target=url) == 0.0
        assert metric(result, TARGET_ERROR, target=url, reason="unauthorized") == 1.0
        assert [e["reason"] for e in logs if e["event"] == "serving_target_down"] == [
            "unauthorized"]
        shown = [repr(logs), metrics_text(result), debug_state(result), repr(result)]
        config = ServingTarget(**target)
        shown += [repr(config), str(config), config.model_dump_json()]
        for text in shown:
            assert PASSWORD not in text
            assert base64.b64encode(f"scraper:{PASSWORD}".encode()).decode() not in text
    guard.expected = basic("scraper", PASSWORD)
    assert metric(await poll(from_file), TARGET_UP, target=url) == 1.0
    assert metric(await poll(inline), TARGET_UP, target=url) == 1.0


async def test_credentials_in_the_url_stay_out_of_names_and_errors() -> None:
    url = "http://scraper:" + PASSWORD + "@127.0.0.1:1/metrics"  # port 1: refused
    with capture_logs() as logs:
        result = await poll({"url": url})
    assert metric(result, TARGET_ERROR, target="http://127.0.0.1:1/metrics",
                  reason="connection_refused") == 1.0
    for text in (repr(logs), metrics_text(result), debug_state(result)):
        assert PASSWORD not in text


def server_context(pki: Pki, *, dns: str = "localhost", ip: bool = True,
                   client_ca: bool = False) -> ssl.SSLContext:
    crt, key = pki.issue("server", server=True, dns=dns, ip=ip)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(crt, key)
    if client_ca:
        ctx.load_verify_locations(pki.ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


@pytest.fixture
async def tls_engine() -> AsyncIterator[Callable[[ssl.SSLContext], Any]]:
    runners: list[web.AppRunner] = []

    async def serve(ctx: ssl.SSLContext) -> str:
        guard = Guard(expected=bearer(TOKEN))
        runner, port = await start_tls(guarded_app(guard), ctx)
        runners.append(runner)
        return f"https://127.0.0.1:{port}/metrics"

    yield serve
    for runner in runners:
        await runner.cleanup()


AUTH = {"authorization": {"credentials": TOKEN}}


async def test_tls_with_a_private_ca(pki: Pki, tls_engine: Callable[[ssl.SSLContext], Any]) -> None:
    url = await tls_engine(server_context(pki))
    ok = await poll({"url": url, **AUTH, "tls_config": {"ca_file": str(pki.ca_file)}})
    assert metric(ok, TARGET_UP, target=url) == 1.0
    untrusted = await poll({"url": url, **AUTH})
    assert metric(untrusted, TARGET_ERROR, target=url, reason="tls_error") == 1.0
    skipped = await poll({"url": url, **AUTH, "tls_config": {"insecure_skip_verify": True}})
    assert metric(skipped, TARGET_UP, target=url) == 1.0
    missing = await poll({"url": url, **AUTH, "tls_config": {"ca_file": str(pki.dir / "no")}})
    assert metric(missing, TARGET_ERROR, target=url, reason="tls_config_unreadable") == 1.0


async def test_tls_server_name(pki: Pki, tls_engine: Callable[[ssl.SSLContext], Any]) -> None:
    url = await tls_engine(server_context(pki, dns="engine.internal", ip=False))
    tls = {"ca_file": str(pki.ca_file)}
    wrong_name = await poll({"url": url, **AUTH, "tls_config": tls})
    assert metric(wrong_name, TARGET_ERROR, target=url, reason="tls_error") == 1.0
    named = await poll({"url": url, **AUTH,
                        "tls_config": {**tls, "server_name": "engine.internal"}})
    assert metric(named, TARGET_UP, target=url) == 1.0


async def test_mutual_tls(pki: Pki, tls_engine: Callable[[ssl.SSLContext], Any]) -> None:
    url = await tls_engine(server_context(pki, client_ca=True))
    crt, key = pki.issue("client", server=False)
    tls = {"ca_file": str(pki.ca_file)}
    anonymous = await poll({"url": url, **AUTH, "tls_config": tls})
    assert metric(anonymous, TARGET_UP, target=url) == 0.0
    client = await poll({"url": url, **AUTH,
                         "tls_config": {**tls, "cert_file": str(crt), "key_file": str(key)}})
    assert metric(client, TARGET_UP, target=url) == 1.0


@pytest.mark.parametrize(("target", "message"), [
    ({"authorization": {"credentials": "a", "credentials_file": "/f"}}, "exactly one of"),
    ({"authorization": {}}, "exactly one of"),
    ({"authorization": {"type": "Basic", "credentials": "a"}}, "use basic_auth"),
    ({"authorization": {"credentials": "a"}, "basic_auth": {"username": "u"}}, "not both"),
    ({"basic_auth": {"username": "u", "password": "p", "password_file": "/f"}}, "not both"),
    ({"tls_config": {"cert_file": "/c"}}, "together"),
    ({"bearer_token": "x"}, "bearer_token"),
])
def test_bad_auth_settings_are_named(target: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build({"serving": {"targets": [{"url": "http://x/metrics", **target}]}}, environ={})
