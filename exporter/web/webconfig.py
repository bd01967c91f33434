"""TLS and basic auth for the HTTP server, from a web-config file in the format of
Prometheus's exporter-toolkit (``--web-config-file``), so operators reuse the file they
already write for node_exporter and friends.

Supported keys::

    tls_server_config:
      cert_file: server.crt            # paths relative to the web-config file
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # or NoClientCert, RequestClientCert,
      client_ca_file: ca.crt                         #    VerifyClientCertIfGiven
      min_version: TLS12               # TLS10..TLS13
      max_version: TLS13
    http_server_config:
      http2: true                      # accepted; aiohttp serves HTTP/1.1
      headers: {X-Frame-Options: deny}
    basic_auth_users:
      prometheus: $2y$10$...           # bcrypt hashes

The file is validated strictly: an unknown key, or a toolkit key this Python server cannot
honour, is an error naming it. Certificate files are re-read when they change on disk
(cert-manager rotation) without a restart.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import os
import secrets
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import bcrypt
import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from exporter.settings import yamlfile
from exporter.settings.config_messages import describe_validation_error
from exporter.settings.section import oversized
from exporter.settings.yamlfile import read_text
from exporter.web.login_guard import FAILURE_REASONS as FAILURE_REASONS
from exporter.web.login_guard import CheckPool, FailureLog

log = structlog.get_logger("exporter.web.webconfig")

AUTHENTICATED = web.RequestKey("basic_auth_accepted", bool)
"""Set on a request basic auth accepted (/debug/state then answers any client)."""


# Endpoints the kubelet probes without credentials; they reveal nothing but liveness.
DEFAULT_OPEN_PATHS = ("/healthz", "/readyz")
BCRYPT_MAX_PASSWORD = 72
"""bcrypt reads at most 72 bytes (the library refuses longer passwords)."""

# exporter-toolkit keys that Python's ssl module cannot implement faithfully: rejected by
# name rather than silently ignored, since each one narrows who may connect.
_UNSUPPORTED = {
    "tls_server_config": {
        "cipher_suites": "Go cipher-suite names have no exact OpenSSL equivalent",
        "curve_preferences": "not configurable per server in Python's ssl module",
        "prefer_server_cipher_suites": "not configurable in Python's ssl module",
        "client_allowed_sans": "SAN allow-lists are not implemented",
        "cert": "inline certificates are not supported; use cert_file",
        "key": "inline keys are not supported; use key_file",
    },
}

_ALLOWED_HEADERS = {
    "Strict-Transport-Security",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
}

TLSVersionName = Literal["TLS10", "TLS11", "TLS12", "TLS13"]
_TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}


class WebConfigError(Exception):
    """The web-config file is unreadable or wrong; the message names the file and key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TLSServerConfig(_Strict):
    cert_file: str
    key_file: str
    client_auth_type: Literal[
        "NoClientCert",
        "RequestClientCert",
        "VerifyClientCertIfGiven",
        "RequireAndVerifyClientCert",
    ] = "NoClientCert"
    client_ca_file: str = ""
    min_version: TLSVersionName = "TLS12"
    max_version: TLSVersionName | None = None


class HTTPServerConfig(_Strict):
    http2: bool = True
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("headers")
    @classmethod
    def _known_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name not in _ALLOWED_HEADERS:
                raise ValueError(
                    f"header {name!r} may not be set (allowed: "
                    f"{', '.join(sorted(_ALLOWED_HEADERS))})"
                )
        return value


class WebConfigFile(_Strict):
    tls_server_config: TLSServerConfig | None = None
    http_server_config: HTTPServerConfig | None = None
    basic_auth_users: dict[str, str] = Field(default_factory=dict)

    @field_validator("basic_auth_users")
    @classmethod
    def _bcrypt_hashes(cls, value: dict[str, str]) -> dict[str, str]:
        for user, hashed in value.items():
            if not user or ":" in user:
                raise ValueError(f"user name {user!r} is empty or contains ':'")
            if not (hashed.startswith(("$2a$", "$2b$", "$2y$")) and len(hashed) == 60):
                raise ValueError(f"password of user {user!r} is not a bcrypt hash")
        return value


@dataclass(frozen=True)
class WebConfig:
    """What the server needs: an SSL context for ``TCPSite`` and middlewares for the app."""

    ssl_context: ssl.SSLContext | None
    middlewares: tuple[Middleware, ...]
    source: Path | None = None
    basic_auth: BasicAuth | None = None


def load(
    path: str | os.PathLike[str] | None,
    on_auth_failure: Callable[[str], None] | None = None,
) -> WebConfig:
    """Read and validate ``path``; ``None``/empty gives plain HTTP without auth.
    ``on_auth_failure(reason)`` is called on every refused login (the daemon counts them)."""
    if not path:
        return WebConfig(None, ())
    source = Path(path)
    spec = parse(source)
    base = source.parent
    ctx = None
    if spec.tls_server_config is not None:
        ctx = _ReloadingTLS(spec.tls_server_config, base, source).context
    middlewares: list[Middleware] = []
    if spec.http_server_config and spec.http_server_config.headers:
        middlewares.append(headers_middleware(spec.http_server_config.headers))
    auth = None
    if spec.basic_auth_users:
        auth = BasicAuth(spec.basic_auth_users, source=source, on_failure=on_auth_failure)
        middlewares.append(auth.middleware)
    log.info(
        "web config loaded",
        file=str(source),
        tls=ctx is not None,
        basic_auth_users=len(spec.basic_auth_users),
    )
    return WebConfig(ctx, tuple(middlewares), source, auth)


def parse(source: Path) -> WebConfigFile:
    try:
        text = read_text(source, "web config file")
    except ValueError as exc:  # unreadable or not UTF-8; the message names the file
        raise WebConfigError(str(exc)) from exc
    try:
        data = yamlfile.parse(text)
    except yamlfile.YamlError as exc:
        raise WebConfigError(f"web config file {source}: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise WebConfigError(f"web config file {source}: top level must be a mapping")
    problem = oversized(data)
    if problem:
        raise WebConfigError(f"web config file {source}: {problem}")
    for section, keys in _UNSUPPORTED.items():
        given = data.get(section)
        for key, why in keys.items():
            if isinstance(given, dict) and key in given:
                raise WebConfigError(
                    f"web config file {source}: {section}.{key} is not supported: {why}"
                )
    try:
        return WebConfigFile.model_validate(data)
    except ValidationError as exc:
        problem = describe_validation_error(exc, WebConfigFile)
        raise WebConfigError(f"web config file {source}: {problem}") from exc


# --- TLS ---------------------------------------------------------------------------------


class _ReloadingTLS:
    """An SSL context whose certificate follows the files on disk.

    On each handshake the SNI callback compares the files' (mtime, size) with the loaded
    ones and swaps in a freshly built context when they changed; a broken new pair is
    logged once and the old one stays in service.
    """

    def __init__(self, cfg: TLSServerConfig, base: Path, source: Path) -> None:
        self._cfg = cfg
        self._source = source
        self._files = [base / cfg.cert_file, base / cfg.key_file]
        self._ca = base / cfg.client_ca_file if cfg.client_ca_file else None
        if self._ca is not None:
            self._files.append(self._ca)
        if (
            cfg.client_auth_type in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
            and self._ca is None
        ):
            raise WebConfigError(
                f"web config file {source}: tls_server_config.client_ca_file "
                f"is required with client_auth_type {cfg.client_auth_type}"
            )
        self._stamp = self._stat()
        self._current = self._build()
        self._failed_stamp: tuple[tuple[int, int], ...] | None = None
        # The outer context only routes handshakes to the current one.
        self.context = self._build()
        self.context.sni_callback = self._on_hello

    def _stat(self) -> tuple[tuple[int, int], ...]:
        try:
            return tuple((s.st_mtime_ns, s.st_size) for s in (p.stat() for p in self._files))
        except OSError as exc:
            raise WebConfigError(
                f"web config file {self._source}: {exc.filename}: {exc.strerror}"
            ) from exc

    def _build(self) -> ssl.SSLContext:
        cfg = self._cfg
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        if cfg.max_version and cfg.max_version < cfg.min_version:  # "TLS1x" sorts by version
            raise WebConfigError(
                f"web config file {self._source}: min_version "
                f"{cfg.min_version} is above max_version {cfg.max_version}"
            )
        ctx.minimum_version = _TLS_VERSIONS[cfg.min_version]
        if cfg.max_version:
            ctx.maximum_version = _TLS_VERSIONS[cfg.max_version]
        cert, key = self._files[0], self._files[1]
        try:
            ctx.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(
                f"web config file {self._source}: cannot load certificate "
                f"{cert} with key {key}: {exc}"
            ) from exc
        if self._ca is not None:
            try:
                ctx.load_verify_locations(cafile=self._ca)
            except (OSError, ssl.SSLError) as exc:
                raise WebConfigError(
                    f"web config file {self._source}: cannot load client_ca_file {self._ca}: {exc}"
                ) from exc
        # RequestClientCert asks for a certificate it never checks; the exporter never looks
        # at an unverified one, so not asking is equivalent.
        ctx.verify_mode = {
            "NoClientCert": ssl.CERT_NONE,
            "RequestClientCert": ssl.CERT_NONE,
            "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
            "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
        }[cfg.client_auth_type]
        return ctx

    def _on_hello(self, sock: ssl.SSLObject, server_name: str | None, _ctx: ssl.SSLContext) -> None:
        try:
            stamp = self._stat()
        except WebConfigError:
            stamp = self._stamp  # files mid-rotation: keep serving the loaded pair
        if stamp != self._stamp and stamp != self._failed_stamp:
            try:
                self._current = self._build()
                self._stamp = stamp
                log.info("TLS certificate reloaded", file=str(self._files[0]))
            except WebConfigError as exc:
                self._failed_stamp = stamp
                log.error("TLS certificate reload failed; keeping the old one", error=str(exc))
        sock.context = self._current


# --- basic auth --------------------------------------------------------------------------


def _stamp(path: Path | None) -> tuple[int, int] | None:
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return None if st is None else (st.st_mtime_ns, st.st_size)


class BasicAuth:
    """HTTP basic auth against bcrypt hashes, safe under a login flood.

    bcrypt costs ~50-250 ms per check by design; a scraper sends the same credentials every
    15 s, so a verified password is remembered as an HMAC under a per-process random key
    and later requests are checked with a constant-time compare. A wrong pair is remembered
    the same way (bounded), so a flood repeating one guess costs one check, and identical
    checks in flight share one run. Other checks go through a :class:`CheckPool` so a flood
    cannot make a scraper wait more than about half a second. Unknown users still pay one
    bcrypt check so timing does not reveal which names exist.
    """

    WAIT_BUDGET = 0.5
    """Seconds of queued checks ahead of a new one, at most (sizes the waiting queues)."""
    WORKERS = 1
    """Threads checking passwords: one, so a flood never takes the core the event loop
    needs to answer scrapes."""
    MAX_REJECTED = 1024
    """Wrong (user, password) pairs remembered."""
    FAILURE_DELAY = 1.0
    """Seconds before a failed login is answered."""
    MAX_DELAYED = 1024
    """Failed logins held for the delay at once; more are answered at once."""

    def __init__(
        self,
        users: Mapping[str, str],
        open_paths: Iterable[str] = DEFAULT_OPEN_PATHS,
        source: Path | None = None,
        on_failure: Callable[[str], None] | None = None,
        failure_delay: float | None = None,
    ) -> None:
        self._users = {u: h.encode() for u, h in users.items()}
        self._source = source
        self._stamp = _stamp(source)
        self._open = frozenset(open_paths)
        self._key = secrets.token_bytes(32)
        self._verified: dict[str, bytes] = {}
        self._rejected: OrderedDict[bytes, None] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Future[bool | None]] = {}
        self.on_failure = on_failure
        """Called with the reason of every failed request (the daemon counts them)."""
        self.failures = FailureLog()
        self.failure_delay = self.FAILURE_DELAY if failure_delay is None else failure_delay
        self._delayed = 0
        # Same cost as the configured hashes, so a miss takes as long as a wrong password;
        # timing it sizes the queues to the wait budget on this machine.
        rounds = max((int(h[4:6]) for h in users.values()), default=10)
        started = time.perf_counter()
        self._dummy = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(rounds=rounds))
        cost = max(time.perf_counter() - started, 1e-4)
        waiting = min(64, int(self.WAIT_BUDGET * self.WORKERS / cost))
        self._pool = CheckPool(self.failures.suspect, self.WORKERS, max_waiting=waiting)

    def _mac(self, user: str, password: bytes) -> bytes:
        return hmac.new(self._key, user.encode() + b"\0" + password, hashlib.sha256).digest()

    def acknowledge_file(self) -> None:
        """The file as it is now was already reported (a refused SIGHUP reload): do not
        log it a second time when the next request notices it changed."""
        self._stamp = _stamp(self._source)

    def _reload_if_changed(self) -> None:
        """Pick up users and passwords rewritten in the web-config file (a rotated Secret)
        without a restart; a file that no longer parses keeps the old users."""
        stamp = _stamp(self._source)
        if stamp == self._stamp or self._source is None:
            return
        self._stamp = stamp
        try:
            users = parse(self._source).basic_auth_users
        except WebConfigError as exc:
            log.error("basic auth users reload failed; keeping the old ones", error=str(exc))
            return
        if users:
            self._users = {u: h.encode() for u, h in users.items()}
            self._verified.clear()  # a changed password must not stay accepted
            self._rejected.clear()  # nor a new one stay refused
            log.info("basic auth users reloaded", file=str(self._source), users=len(users))

    async def check(self, header: str | None, client: str = "") -> bool:
        return await self.verdict(header, client) is None

    async def verdict(self, header: str | None, client: str = "") -> str | None:
        """None when ``header`` holds valid credentials, else the reason it fails
        (one of :data:`FAILURE_REASONS`)."""
        self._reload_if_changed()
        if not header:
            return "missing"
        creds = _parse_basic(header)
        if creds is None:
            return "malformed"
        user, password = creds
        if len(password) > BCRYPT_MAX_PASSWORD:
            return "wrong_credentials"  # bcrypt cannot check it: never a configured password
        mac = self._mac(user, password)
        known = self._verified.get(user)
        if known is not None and hmac.compare_digest(known, mac):
            return None
        if mac in self._rejected:
            self._rejected.move_to_end(mac)
            return "wrong_credentials"
        pending = self._inflight.get(mac)
        if pending is None:
            pending = asyncio.ensure_future(self._bcrypt(user, password, mac, client))
            self._inflight[mac] = pending
            pending.add_done_callback(lambda _: self._inflight.pop(mac, None))
        ok = await asyncio.shield(pending)
        if ok is None:
            return "throttled"
        return None if ok else "wrong_credentials"

    async def _bcrypt(self, user: str, password: bytes, mac: bytes, client: str) -> bool | None:
        users = self._users
        hashed = users.get(user, self._dummy)
        ok = await self._pool.run(lambda: bcrypt.checkpw(password, hashed), client)
        if ok is None:
            return None
        if users is not self._users:  # reloaded meanwhile: this answer is for old users
            return False
        if ok and user in users:
            self._verified[user] = mac
            return True
        self._rejected[mac] = None
        while len(self._rejected) > self.MAX_REJECTED:
            self._rejected.popitem(last=False)
        return False

    def _failed(self, request: web.Request, client: str, reason: str) -> None:
        if self.on_failure is not None:
            self.on_failure(reason)
        count = self.failures.failed(client)
        if count:
            log.warning(
                "basic auth failed",
                client=client,
                reason=reason,
                path=request.path[:64],
                failures=count,  # since this client's last line, at most a minute ago
            )

    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in self._open:
            return await handler(request)
        client = request.remote or "unknown"
        reason = await self.verdict(request.headers.get("Authorization"), client)
        if reason is None:
            request[AUTHENTICATED] = True
            return await handler(request)
        self._failed(request, client, reason)
        # Answering a failure late slows each flooding connection to one guess per delay,
        # which keeps the event loop free for real scrapes; past the cap, answer at once.
        if self._delayed < self.MAX_DELAYED:
            self._delayed += 1
            try:
                await asyncio.sleep(self.failure_delay)
            finally:
                self._delayed -= 1
        if reason == "throttled":
            return web.Response(
                status=429, text="Too many login attempts\n", headers={"Retry-After": "1"}
            )
        return web.Response(
            status=401,
            text="Unauthorized\n",
            headers={"WWW-Authenticate": 'Basic realm="gpu-goodput-exporter"'},
        )

    # aiohttp recognises new-style middlewares by this attribute.
    middleware.__middleware_version__ = 1  # type: ignore[attr-defined]

    def close(self) -> None:
        self._pool.close()


def _parse_basic(header: str | None) -> tuple[str, bytes] | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic" or not token:
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = raw.partition(b":")
    if not sep:
        return None
    try:
        return user.decode(), password
    except UnicodeDecodeError:
        return None


def headers_middleware(headers: Mapping[str, str]) -> Middleware:
    fixed = dict(headers)

    @web.middleware
    async def add_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            exc.headers.update(fixed)
            raise
        response.headers.update(fixed)
        return response

    return add_headers
