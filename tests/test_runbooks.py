"""Runbook links work out of the box: the daemon serves the runbooks shipped in its package
at /runbooks/<AlertName>, and every alert's runbook_url names one of those pages.

A real daemon (simulated GPUs) listens on loopback behind a web config with TLS and basic
auth, like every other endpoint; each alert's link is fetched from it.
"""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import pytest
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry

from exporter import runbooks
from exporter.metrics.cache import ExpositionCache
from exporter.metrics.encode import Encoder
from exporter.snapshot import SnapshotStore
from exporter.sources.nvml_session import NvmlSession
from exporter.web import webconfig
from exporter.web.server import build_app
from exporter.wiring.config import DEFAULT_PORT
from exporter.wiring.config import build as build_settings
from exporter.wiring.daemon import build
from mixin.config import load as load_mixin

pytest.importorskip("cryptography.x509")
from tests.support.pki import Pki, make_pki

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "runbook-reader"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
AUTH = {"Authorization": "Basic " + base64.b64encode(f"sre:{PASSWORD}".encode()).decode()}


def alert_links() -> dict[str, str]:
    """Alert -> runbook_url, from the shipped rule files."""
    links = {}
    for path in sorted((ROOT / "alerts").glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            links.update({r["alert"]: r["annotations"]["runbook_url"]
                          for r in group["rules"] if "alert" in r})
    return links


@pytest.fixture(autouse=True)
def no_failure_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webconfig.BasicAuth, "FAILURE_DELAY", 0.0)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    pki = make_pki(tmp_path)
    pki.issue("server", server=True)
    return pki


@pytest.fixture
async def daemon_url(sim: Any, pki: Pki) -> AsyncIterator[tuple[str, ssl.SSLContext]]:
    """https://127.0.0.1:<port> of a real daemon behind TLS and basic auth."""
    config = pki.dir / "web-config.yml"
    config.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"},
        "basic_auth_users": {"sre": HASH}}))
    web_config = webconfig.load(config)
    settings = build_settings({"simulate": True, "node_name": "node-a"}, {})
    session = NvmlSession(sim, "simulated")
    session.open()
    runner = web.AppRunner(build(settings, session).app(list(web_config.middlewares)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=web_config.ssl_context)
    await site.start()
    client_ctx = ssl.create_default_context(cafile=str(pki.dir / "ca.crt"))
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}", client_ctx
    finally:
        await runner.cleanup()


async def fetch(url: str, ctx: ssl.SSLContext | None,
                headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as http, \
            http.get(url, ssl=ctx if ctx is not None else False, headers=headers,
                     allow_redirects=False) as resp:
        return resp.status, resp.content_type, await resp.text()


def test_default_links_point_at_an_exporter_on_its_default_port() -> None:
    base = load_mixin().runbook_base_url
    assert base == f"http://localhost:{DEFAULT_PORT}/runbooks/"
    links = alert_links()
    assert len(links) >= 18
    assert links == {name: f"{base}{name}.md" for name in links}


async def test_every_alerts_runbook_url_is_served_by_a_real_daemon(
        daemon_url: tuple[str, ssl.SSLContext]) -> None:
    url, ctx = daemon_url
    for name, link in alert_links().items():
        path = urllib.parse.urlsplit(link).path
        source = (ROOT / "exporter" / "runbooks" / f"{name}.md").read_text()
        status, kind, body = await fetch(url + path, ctx, AUTH)
        assert (status, kind) == (200, "text/html"), name
        assert f"<title>{name} - runbook</title>" in body and f"# {name}\n" in body
        # The same page without the .md, and the Markdown itself on request.
        assert (await fetch(f"{url}/runbooks/{name}", ctx, AUTH))[2] == body
        md = await fetch(url + path, ctx, {**AUTH, "Accept": "text/markdown"})
        assert md == (200, "text/markdown", source)
        # Behind the web config like /metrics: no password, no page.
        assert (await fetch(url + path, ctx))[0] == 401


async def test_index_landing_page_and_unknown_names(
        daemon_url: tuple[str, ssl.SSLContext]) -> None:
    url, ctx = daemon_url
    status, _, index = await fetch(f"{url}/runbooks/", ctx, AUTH)
    assert status == 200
    for name in alert_links():
        assert f'<a href="{name}">{name}</a>' in index
    assert 'href="runbooks/"' in (await fetch(f"{url}/", ctx, AUTH))[2]
    assert (await fetch(f"{url}/runbooks", ctx, AUTH))[0] == 302
    for bad in ("NoSuchAlert", "NoSuchAlert.md", "..%2F__init__.py", "%2E%2E%2Fserver.py"):
        status, _, text = await fetch(f"{url}/runbooks/{bad}", ctx, AUTH)
        assert status == 404 and "/runbooks/" in text, bad
    assert (await fetch(f"{url}/runbooks/../pyproject.toml", ctx, AUTH))[0] == 404


async def test_served_without_any_gpu_source() -> None:
    """The pages come from the package alone: an app whose store never saw a poll and that
    has no NVML session serves every runbook."""
    store = SnapshotStore("n")
    app = build_app(store, ExpositionCache(Encoder([], CollectorRegistry()),
                                           lambda: store.current), "none")
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        for name in alert_links():
            assert (await fetch(f"{url}/runbooks/{name}.md", None))[0] == 200
    finally:
        await runner.cleanup()
    code = ("import sys; import exporter.runbooks as r; r.load(); "
            "assert not {'pynvml', 'exporter.sources'} & set(sys.modules), sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_every_alert_and_only_alerts_have_a_runbook() -> None:
    assert sorted(runbooks.load()) == sorted(alert_links())
