"""One engine, one identity: URLs that reach the same address, port and path are one target.

``localhost``, ``127.0.0.1`` and ``::1`` name one engine on this host, and two host names
may resolve to one address; scraped under both spellings, its tokens would be counted
twice. Static targets are compared once, when the settings are read (start-up, SIGHUP):
a host name is resolved only when another target shares everything else about its URL
(scheme, port, path, query), so a config of distinct endpoints costs no DNS look-up.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from exporter import urls

LOOPBACK = "loopback"
"""The one address every loopback alias stands for."""
ALIASES = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"})
"""Host spellings that reach this host's engines on loopback (``0.0.0.0`` connects there)."""

Resolve = Callable[[str], frozenset[str]]
"""Host name -> the addresses it resolves to (empty when it does not)."""


def resolve(host: str) -> frozenset[str]:
    """The addresses ``host`` resolves to now; none when it does not resolve."""
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return frozenset()
    return frozenset(str(info[4][0]) for info in found)


def _canonical(address: str) -> str:
    """An address as compared: every loopback alias is :data:`LOOPBACK`."""
    with contextlib.suppress(ValueError):
        address = str(ipaddress.ip_address(address))
    return LOOPBACK if address in ALIASES else address


def _rest(url: str) -> tuple[str, str] | None:
    """(URL without its host, host) of a normalised URL; None when it does not parse."""
    try:
        parts = urlsplit(urls.normalise(url))
        port = parts.port or urls.DEFAULT_PORTS[parts.scheme]
    except (ValueError, KeyError):
        return None
    host = parts.hostname or ""
    return f"{parts.scheme}://:{port}{parts.path}?{parts.query}", host


def addresses(target_urls: Iterable[str], look_up: Resolve = resolve) -> dict[str, frozenset[str]]:
    """Each URL's identities, (``rest@address``), for URLs that share their rest with
    another URL of a different host; a URL alone in its rest is not resolved (absent)."""
    parsed = {url: _rest(url) for url in target_urls}
    hosts: dict[str, set[str]] = {}
    for found in parsed.values():
        if found is not None:
            hosts.setdefault(found[0], set()).add(found[1])
    out: dict[str, frozenset[str]] = {}
    for url, found in parsed.items():
        if found is None or len(hosts[found[0]]) < 2:
            continue
        rest, host = found
        out[url] = frozenset(f"{rest}@{a}" for a in _addresses_of(host, look_up))
    return out


def _addresses_of(host: str, look_up: Resolve) -> set[str]:
    """A host's canonical addresses: an address as written, a name as it resolves (the
    name itself when it does not)."""
    try:
        return {_canonical(str(ipaddress.ip_address(host)))}
    except ValueError:
        pass
    if host in ALIASES:
        return {LOOPBACK}
    return {_canonical(a) for a in look_up(host)} or {host}
