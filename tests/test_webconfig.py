"""Web-config (exporter-toolkit format): strict parsing, and real TLS + basic auth on a
loopback aiohttp server with certificates generated here."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import pytest
import yaml
from aiohttp import web

from exporter.web import webconfig
from exporter.web.webconfig import WebConfigError

x509 = pytest.importorskip("cryptography.x509")
from tests.support.pki import Pki, make_pki  # noqa: E402

PASSWORD = "s3cret-scrape"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()


@pytest.fixture(autouse=True)
def no_failure_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed logins are answered after a second (a tarpit for floods): not in these tests;
    tests/test_fault_battery.py runs the real delay."""
    monkeypatch.setattr(webconfig.BasicAuth, "FAILURE_DELAY", 0.0)


# --- certificates ------------------------------------------------------------------------


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    pki = make_pki(tmp_path)
    pki.issue("server", server=True)
    pki.issue("client", server=False)
    return pki


def write_config(dir: Path, doc: dict[str, Any]) -> Path:
    path = dir / "web-config.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


TLS = {"cert_file": "server.crt", "key_file": "server.key"}


# --- parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"tls_server_confg": {}}, "unknown config key 'tls_server_confg'"),
        ({"tls_server_config": {**TLS, "min_versoin": "TLS12"}},
         "unknown config key 'tls_server_config.min_versoin'"),
        ({"tls_server_config": {"cert_file": "server.crt"}},
         "'tls_server_config.key_file': Field required"),
        ({"tls_server_config": {**TLS, "cipher_suites": ["TLS_AES_128_GCM_SHA256"]}},
         "tls_server_config.cipher_suites is not supported"),
        ({"tls_server_config": {**TLS, "min_version": "SSL3"}}, "tls_server_config.min_version"),
        ({"tls_server_config": {**TLS, "client_auth_type": "RequireAndVerifyClientCert"}},
         "client_ca_file is required"),
        ({"tls_server_config": {**TLS, "min_version": "TLS13", "max_version": "TLS12"}},
         "above max_version"),
        ({"tls_server_config": {"cert_file": "nope.crt", "key_file": "server.key"}}, "nope.crt"),
        ({"tls_server_config": {"cert_file": "server.crt", "key_file": "client.key"}},
         "cannot load certificate"),
        ({"basic_auth_users": {"prometheus": "plaintext"}}, "not a bcrypt hash"),
        ({"http_server_config": {"headers": {"Server": "x"}}}, "header 'Server' may not be set"),
    ],
)
def test_bad_files_are_errors_naming_the_key(pki: Pki, doc: dict[str, Any], message: str) -> None:
    with pytest.raises(WebConfigError, match="web config file .*" + message.replace(".", r"\.")):
        webconfig.load(write_config(pki.dir, doc))


def test_unreadable_and_non_yaml_files(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match=r"missing\.yml"):
        webconfig.load(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("basic_auth_users: [unclosed\n")
    with pytest.raises(WebConfigError, match="not valid YAML"):
        webconfig.load(bad)


def test_a_non_utf8_file_is_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_bytes(b"basic_auth_users:\n  prom\xe9theus: x\n")
    with pytest.raises(WebConfigError) as err:
        webconfig.load(path)
    assert str(path) in str(err.value) and "not UTF-8" in str(err.value)
    assert "\n" not in str(err.value)


def test_empty_or_absent_file_means_plain_http(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yml"
    empty.write_text("")
    for source in (None, empty):
        cfg = webconfig.load(source)
        assert cfg.ssl_context is None and cfg.middlewares == ()


# --- real servers on loopback ------------------------------------------------------------


def _text(body: str) -> Callable[[web.Request], Any]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=body)

    return handler


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Path], Any]]:
    runners: list[web.AppRunner] = []

    async def start(config_file: Path) -> str:
        cfg = webconfig.load(config_file)
        app = web.Application(middlewares=list(cfg.middlewares))
        app.router.add_get("/metrics", _text("goodput_gpu_up 1\n"))
        app.router.add_get("/healthz", _text("ok\n"))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=cfg.ssl_context)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"{'https' if cfg.ssl_context else 'http'}://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


def client_ctx(pki: Pki, cert: bool = False,
               max_tls: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.dir / "ca.crt"))
    if cert:
        ctx.load_cert_chain(pki.dir / "client.crt", pki.dir / "client.key")
    if max_tls:
        ctx.maximum_version = max_tls
    return ctx


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def get(url: str, ctx: ssl.SSLContext | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    async with aiohttp.ClientSession() as session, \
            session.get(url, ssl=ctx if ctx is not None else False, headers=headers) as resp:
        await resp.read()
        return resp.status, dict(resp.headers)


async def test_tls_with_basic_auth(pki: Pki, serve: Callable[[Path], Any]) -> None:
    url = await serve(write_config(pki.dir, {
        "tls_server_config": TLS,
        "basic_auth_users": {"prometheus": HASH},
        "http_server_config": {"headers": {"X-Frame-Options": "deny"}},
    }))
    assert url.startswith("https://")
    ctx = client_ctx(pki)
    status, headers = await get(f"{url}/metrics", ctx, basic("prometheus", PASSWORD))
    assert status == 200 and headers["X-Frame-Options"] == "deny"
    status, headers = await get(f"{url}/metrics", ctx, basic("prometheus", "wrong"))
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert (await get(f"{url}/metrics", ctx, basic("nobody", PASSWORD)))[0] == 401
    assert (await get(f"{url}/metrics", ctx))[0] == 401
    assert (await get(f"{url}/metrics", ctx, {"Authorization": "Basic !!notbase64"}))[0] == 401
    assert (await get(f"{url}/metrics", ctx, {"Authorization": "Bearer x"}))[0] == 401
    # Probes need no password.
    assert (await get(f"{url}/healthz", ctx))[0] == 200


async def test_plain_http_to_the_tls_port_fails(pki: Pki, serve: Callable[[Path], Any]) -> None:
    url = await serve(write_config(pki.dir, {"tls_server_config": TLS}))
    with pytest.raises(aiohttp.ClientError):
        await get(url.replace("https://", "http://") + "/metrics")


async def test_untrusted_server_cert_is_refused(pki: Pki, serve: Callable[[Path], Any]) -> None:
    url = await serve(write_config(pki.dir, {"tls_server_config": TLS}))
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await get(f"{url}/metrics", ssl.create_default_context())


async def test_min_version_is_enforced(pki: Pki, serve: Callable[[Path], Any]) -> None:
    url = await serve(write_config(pki.dir, {"tls_server_config": {**TLS, "min_version": "TLS13"}}))
    assert (await get(f"{url}/metrics", client_ctx(pki)))[0] == 200
    with pytest.raises(aiohttp.ClientError):
        await get(f"{url}/metrics", client_ctx(pki, max_tls=ssl.TLSVersion.TLSv1_2))


async def test_mutual_tls(pki: Pki, serve: Callable[[Path], Any]) -> None:
    url = await serve(write_config(pki.dir, {"tls_server_config": {
        **TLS, "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "ca.crt"}}))
    assert (await get(f"{url}/metrics", client_ctx(pki, cert=True)))[0] == 200
    with pytest.raises(aiohttp.ClientError):
        await get(f"{url}/metrics", client_ctx(pki, cert=False))


async def test_verified_credentials_are_cached(pki: Pki, serve: Callable[[Path], Any],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    url = await serve(write_config(pki.dir, {"basic_auth_users": {"prometheus": HASH}}))
    calls = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    for _ in range(3):
        assert (await get(f"{url}/metrics", None, basic("prometheus", PASSWORD)))[0] == 200
    assert len(calls) == 1
    # A wrong password is never served from the cache.
    assert (await get(f"{url}/metrics", None, basic("prometheus", PASSWORD + "x")))[0] == 401
    assert len(calls) == 2


async def test_cert_rotation_needs_no_restart(pki: Pki, serve: Callable[[Path], Any]) -> None:
    url = await serve(write_config(pki.dir, {"tls_server_config": TLS}))

    host, port = url.removeprefix("https://").split(":")

    async def served_serial() -> int:
        _, writer = await asyncio.open_connection(host, int(port), ssl=client_ctx(pki))
        der = writer.get_extra_info("ssl_object").getpeercert(True)
        writer.close()
        await writer.wait_closed()
        return int(x509.load_der_x509_certificate(der).serial_number)

    before = await served_serial()
    crt, _ = pki.issue("server", server=True)  # overwrites server.crt/server.key
    rotated = x509.load_pem_x509_certificate(crt.read_bytes()).serial_number
    assert rotated != before
    assert await served_serial() == rotated


async def test_password_rewritten_while_running_takes_effect(
    pki: Pki, serve: Callable[[Path], Any]
) -> None:
    """A rotated Secret rewrites the web-config file: the new password works and the old one
    (though already verified and remembered) is refused, with no restart."""
    path = write_config(pki.dir, {"tls_server_config": TLS, "basic_auth_users": {"prom": HASH}})
    url = await serve(path) + "/metrics"
    ctx = client_ctx(pki)
    assert (await get(url, ctx, basic("prom", PASSWORD)))[0] == 200
    new = bcrypt.hashpw(b"rotated-secret", bcrypt.gensalt(rounds=4)).decode()
    write_config(pki.dir, {"tls_server_config": TLS, "basic_auth_users": {"prom": new}})
    assert (await get(url, ctx, basic("prom", "rotated-secret")))[0] == 200
    assert (await get(url, ctx, basic("prom", PASSWORD)))[0] == 401
    # a broken rewrite keeps the last good users
    path.write_text("basic_auth_users: [not, a, mapping]\n")
    assert (await get(url, ctx, basic("prom", "rotated-secret")))[0] == 200


# --- the Helm chart's rendered web-config Secret -----------------------------------------


@pytest.mark.parametrize("client_auth", ["NoClientCert", "RequireAndVerifyClientCert"])
def test_the_helm_charts_web_config_secret_loads(pki: Pki, client_auth: str) -> None:
    """The Secret the chart renders from webConfig.* is a file the daemon accepts (its TLS
    paths pointed at real files in place of the mounted Secret)."""
    from tests.support.helm import manifests

    values = {"webConfig": {"enabled": True, "basicAuthUsers": {"prometheus": HASH},
                            "tls": {"enabled": True, "secretName": "t",
                                    "clientAuthType": client_auth, "minVersion": "TLS13"}}}
    [secret] = [o for o in manifests(values) if o["kind"] == "Secret"]
    text = secret["stringData"]["web-config.yml"]
    (pki.dir / "tls.crt").write_bytes((pki.dir / "server.crt").read_bytes())
    (pki.dir / "tls.key").write_bytes((pki.dir / "server.key").read_bytes())
    path = pki.dir / "web-config.yml"
    path.write_text(text.replace("/etc/gpu-goodput-exporter/tls", str(pki.dir)))
    loaded = webconfig.load(path)
    assert loaded.ssl_context is not None
    assert loaded.ssl_context.minimum_version == ssl.TLSVersion.TLSv1_3
    required = client_auth == "RequireAndVerifyClientCert"
    assert (loaded.ssl_context.verify_mode == ssl.CERT_REQUIRED) is required
    assert loaded.middlewares  # basic auth


# --- login floods ------------------------------------------------------------------------


def _header(user: str, password: str | bytes) -> str:
    raw = password if isinstance(password, bytes) else password.encode()
    return "Basic " + base64.b64encode(user.encode() + b":" + raw).decode()


async def test_failures_are_counted_by_bounded_reason(pki: Pki, serve: Callable[[Path], Any],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    reasons: list[str] = []
    real_load = webconfig.load

    def counting_load(path: Path) -> webconfig.WebConfig:
        cfg = real_load(path)
        assert cfg.basic_auth is not None
        cfg.basic_auth.on_failure = reasons.append
        return cfg

    monkeypatch.setattr(webconfig, "load", counting_load)
    url = await serve(write_config(pki.dir, {"basic_auth_users": {"prometheus": HASH}}))
    for headers in (None, {"Authorization": "Basic !!"}, basic("prometheus", "nope"),
                    basic("nobody", "nope"), basic("prometheus", PASSWORD)):
        await get(f"{url}/metrics", None, headers)
    # bcrypt refuses passwords over 72 bytes: a wrong password, not a server error.
    status, _ = await get(f"{url}/metrics", None, basic("prometheus", "x" * 100))
    assert status == 401
    assert reasons == ["missing", "malformed", "wrong_credentials", "wrong_credentials",
                       "wrong_credentials"]
    assert set(reasons) <= set(webconfig.FAILURE_REASONS)


async def test_a_repeated_wrong_password_costs_one_check(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    auth = webconfig.BasicAuth({"prometheus": HASH})
    try:
        # 50 at once share one check; later ones are answered from memory.
        verdicts = await asyncio.gather(
            *(auth.verdict(_header("prometheus", "guess"), "10.0.0.9") for _ in range(50))
        )
        assert verdicts == ["wrong_credentials"] * 50
        assert await auth.verdict(_header("prometheus", "guess")) == "wrong_credentials"
        assert len(calls) == 1
        assert await auth.verdict(_header("prometheus", PASSWORD)) is None
        assert len(calls) == 2
    finally:
        auth.close()


async def test_a_full_queue_refuses_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Distinct guesses beyond what the queue holds are throttled without waiting, while a
    client with no failures still gets its check ahead of the queued guesses."""
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    real = bcrypt.checkpw

    order: list[bytes] = []

    def blocking(password: bytes, hashed: bytes) -> bool:
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(timeout=10)
        order.append(password)
        return real(password, hashed)

    auth = webconfig.BasicAuth({"prometheus": HASH})
    monkeypatch.setattr(bcrypt, "checkpw", blocking)
    waiting = auth._pool._max_waiting
    try:
        auth.failures.failed("10.0.0.66")  # a client that failed before: a suspect
        flood = [asyncio.create_task(auth.verdict(_header("prometheus", f"guess{i}"),
                                                  "10.0.0.66"))
                 for i in range(waiting + 1)]  # one running, the rest waiting
        async with asyncio.timeout(5):
            while auth._pool.waiting < waiting:
                await asyncio.sleep(0.005)
        assert await auth.verdict(_header("prometheus", "one-more"), "10.0.0.66") == "throttled"
        valid = asyncio.create_task(auth.verdict(_header("prometheus", PASSWORD), "10.0.0.1"))
        await asyncio.sleep(0.05)
        release.set()
        assert await valid is None
        assert not valid.cancelled()
        assert set(await asyncio.gather(*flood)) == {"wrong_credentials"}
        assert order[:2] == [b"guess0", PASSWORD.encode()]  # the clean client went first
    finally:
        release.set()
        auth.close()
