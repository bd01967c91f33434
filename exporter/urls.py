"""Target URLs: one identity per endpoint, and a form that is safe to show.

Two spellings of one endpoint (``HTTP://Host:80/metrics#x`` and ``http://host/metrics``)
must be one target, or its tokens are counted twice; and a URL may carry secrets (a
password in the userinfo, ``?token=...`` in the query) that must never reach a label, a
log line or /debug/state. A query parameter is a secret when its name says so
(:func:`is_secret`: tokens, keys, passwords, signatures, sessions); any other value stays
visible, because it may be what tells two engines behind one proxy apart
(``?engine=a``, ``?engine=b``). A leaf module (no exporter imports) so config validation
can use it.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, unquote_plus, urlsplit, urlunsplit

MAX_URL_CHARS = 2048
"""Longest URL taken: it becomes a ``target`` label, so it is capped like any label."""
MAX_HOST_CHARS = 253
MAX_HOST_LABEL_CHARS = 63
"""DNS limits: a longer host name can never resolve (and cannot be IDNA-encoded)."""

SECRET = "<secret>"
"""What a redacted secret reads as (Prometheus's spelling)."""
SECRET_PARTS = (
    "token", "key", "pass", "pwd", "secret", "auth", "sig", "cred", "session", "jwt",
    "bearer", "cookie", "otp", "nonce",
)
"""A query parameter whose name (lower case, letters and digits only) holds one of these
is a secret: access_token, api_key, X-Amz-Signature, password, client_secret, ..."""
DEFAULT_PORTS = {"http": 80, "https": 443}


class BadUrl(ValueError):
    """A target URL that cannot be scraped; the message names the URL, redacted."""


def normalise(url: str, what: str = "serving target") -> str:
    """The URL every spelling of one endpoint shares: scheme and host lower case, default
    port and fragment dropped, empty path ``/``. Raises :class:`BadUrl` naming ``what``.
    The one check of every scrape URL the settings take."""
    if len(url) > MAX_URL_CHARS:
        raise BadUrl(f"{what} {redact(url)[:64]!r}... is longer than {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        raise BadUrl(f"{what} {redact(url)!r} is not a valid URL: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise BadUrl(f"{what} {redact(url)!r} is not an http(s) URL")
    if not host:
        raise BadUrl(f"{what} {redact(url)!r} names no host")
    if len(host) > MAX_HOST_CHARS or any(len(p) > MAX_HOST_LABEL_CHARS for p in host.split(".")):
        raise BadUrl(
            f"{what} {redact(url)[:100]!r}: host name longer than DNS allows "
            f"({MAX_HOST_CHARS} characters, {MAX_HOST_LABEL_CHARS} per label)"
        )
    if any(c.isspace() for c in url.strip()):
        raise BadUrl(f"{what} {redact(url)!r} contains white space")
    if not url.strip().isprintable():  # it becomes the target label: no terminal controls
        raise BadUrl(f"{what} {redact(url)!a} contains control characters")
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    if userinfo:
        netloc = f"{userinfo}@{netloc}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def redact(url: str) -> str:
    """``url`` with its userinfo and every secret query value replaced by ``<secret>``;
    never raises (a malformed URL is redacted as well as it can be: its whole query)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        head, _, _ = url.partition("?")
        if "@" in head:
            scheme, sep, rest = head.partition("://")
            head = f"{scheme}{sep}{SECRET}@{rest.rpartition('@')[2]}"
        return head + (f"?{SECRET}" if "?" in url else "")
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{SECRET}@{netloc.rpartition('@')[2]}"
    return urlunsplit((parts.scheme, netloc, parts.path, _query(parts.query), ""))


def label(url: str) -> str:
    """The ``target`` label of a URL target: scheme, host, port, path and query, secret
    query values as ``<secret>``; the userinfo is left out (it names no endpoint)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url).split("@")[-1] if "@" in url else redact(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, _query(parts.query), ""))


def secrets(url: str) -> list[str]:
    """Every secret text in ``url`` (userinfo, its password, query values), longest first."""
    found: list[str] = []
    try:
        parts = urlsplit(url)
    except ValueError:
        return found
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        found += [userinfo, *userinfo.split(":", 1)]
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if is_secret(key):
            found += [value, quote(value, safe="")]
    found += [v for k, _, v in (p.partition("=") for p in parts.query.split("&")) if is_secret(k)]
    return sorted({s for s in found if len(s) >= 2}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` (an error message) with every secret of ``url`` replaced by ``<secret>``."""
    for secret in secrets(url):
        text = text.replace(secret, SECRET)
    return text


def is_secret(name: str) -> bool:
    """Whether a query parameter called ``name`` carries a secret (:data:`SECRET_PARTS`),
    judged on the name as the engine reads it: percent-decoded (``%74oken`` is
    ``token``), ``+`` as a space, repeatedly (``%2574oken``)."""
    for _ in range(4):
        decoded = unquote_plus(name)
        if decoded == name:
            break
        name = decoded
    plain = "".join(c for c in name.lower() if c.isalnum())
    return any(part in plain for part in SECRET_PARTS)


def _query(query: str) -> str:
    """The query with every secret parameter's value as ``<secret>``; the rest as given."""
    if not query:
        return ""
    parts = (p.partition("=") for p in query.split("&") if p)
    return "&".join(
        f"{key}={SECRET}" if is_secret(key) else key + sep + value for key, sep, value in parts
    )
