"""Credentials and TLS settings of one target, with their files re-read when they change.

A rotated token or certificate is picked up on the next scrape without a restart: each
scrape compares the files' mtimes (one ``stat`` each) and reads only what changed. Secrets
live in headers sent to the target and nowhere else: not in reprs, errors or logs.
"""

from __future__ import annotations

import base64
import os
import ssl

from exporter.sources.serving.config import Authorization, BasicAuth, TlsConfig
from exporter.sources.serving.errors import ScrapeError
from exporter.sources.serving.fetch import Request

Stamp = tuple[tuple[str, float], ...]
"""(path, mtime) of each file a value was built from."""


class Access:
    """One target's ``authorization``/``basic_auth``/``tls_config``, resolved per scrape."""

    def __init__(
        self,
        authorization: Authorization | None = None,
        basic_auth: BasicAuth | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        self._authorization = authorization
        self._basic = basic_auth
        self._tls = tls
        self._header: tuple[Stamp, tuple[tuple[str, str], ...]] | None = None
        self._context: tuple[Stamp, ssl.SSLContext] | None = None

    def __repr__(self) -> str:
        kinds = [
            name
            for name, value in (
                ("authorization", self._authorization),
                ("basic_auth", self._basic),
                ("tls_config", self._tls),
            )
            if value is not None
        ]
        return f"Access({', '.join(kinds)})"

    def resolve(self) -> Request:
        """This scrape's request settings, or :class:`ScrapeError` naming the unreadable
        file."""
        return Request(
            dict(self._headers()),
            self._ssl(),
            (self._tls.server_name or None) if self._tls is not None else None,
        )

    # headers ---------------------------------------------------------------------------------

    def _headers(self) -> tuple[tuple[str, str], ...]:
        paths = self._header_files()
        stamp = _stamp(paths, "credentials_unreadable")
        if self._header is None or self._header[0] != stamp:
            self._header = (stamp, self._build_headers())
        return self._header[1]

    def _header_files(self) -> tuple[str, ...]:
        if self._authorization is not None and self._authorization.credentials_file:
            return (self._authorization.credentials_file,)
        if self._basic is not None and self._basic.password_file:
            return (self._basic.password_file,)
        return ()

    def _build_headers(self) -> tuple[tuple[str, str], ...]:
        auth = self._authorization
        if auth is not None:
            if auth.credentials is not None:
                secret = auth.credentials.get_secret_value()
            else:
                secret = _read_secret(auth.credentials_file)
            return (("Authorization", f"{auth.type.strip()} {secret}"),)
        basic = self._basic
        if basic is not None:
            if basic.password is not None:
                password = basic.password.get_secret_value()
            elif basic.password_file:
                password = _read_secret(basic.password_file)
            else:
                password = ""
            token = base64.b64encode(f"{basic.username}:{password}".encode()).decode("ascii")
            return (("Authorization", f"Basic {token}"),)
        return ()

    # TLS -------------------------------------------------------------------------------------

    def _ssl(self) -> ssl.SSLContext | None:
        tls = self._tls
        if tls is None:
            return None
        paths = tuple(p for p in (tls.ca_file, tls.cert_file, tls.key_file) if p)
        stamp = _stamp(paths, "tls_config_unreadable")
        if self._context is None or self._context[0] != stamp:
            self._context = (stamp, _context(tls))
        return self._context[1]


def _stamp(paths: tuple[str, ...], reason: str) -> Stamp:
    out = []
    for path in paths:
        try:
            out.append((path, os.stat(path).st_mtime))
        except OSError as exc:
            raise ScrapeError(reason, f"cannot read {path}: {exc.strerror or exc}") from exc
    return tuple(out)


def _read_secret(path: str) -> str:
    """A token or password file, without the trailing newline editors add."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError as exc:
        raise ScrapeError("credentials_unreadable", f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ScrapeError("credentials_unreadable", f"{path} is not UTF-8") from exc


def _context(tls: TlsConfig) -> ssl.SSLContext:
    try:
        ctx = ssl.create_default_context(cafile=tls.ca_file or None)
        if tls.cert_file:
            ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ScrapeError("tls_config_unreadable", f"bad tls_config: {exc}") from exc
    if tls.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
