"""One engine, one identity: URLs that reach the same address, port and path are one target.

``localhost`` (``LOCALHOST.``), ``127.0.0.1`` (``127.1``, ``[::ffff:127.0.0.1]``) and
``::1`` name one engine on this host, and two host names
may resolve to one address; scraped under both spellings, its tokens would be counted
twice. Static targets are compared once, when the settings are read (start-up, SIGHUP):
a host name is resolved only when another target shares everything else about its URL
(scheme, port, path, query), so a config of distinct endpoints costs no DNS look-up.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from exporter import urls

LOOPBACK = "loopback"
"""The one address every loopback alias stands for."""
ALIASES = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"})
"""Host spellings that reach this host's engines on loopback (``0.0.0.0`` connects there)."""

LEGACY_IPV4 = re.compile(r"(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}")
"""An IPv4 address in one of the older spellings the C resolver takes (``127.1``)."""

Resolve = Callable[[str], frozenset[str]]
"""Host name -> the addresses it resolves to (empty when it does not)."""


def resolve(host: str) -> frozenset[str]:
    """The addresses ``host`` resolves to now; none when it does not resolve."""
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return frozenset()
    return frozenset(str(info[4][0]) for info in found)


def canonical(host: str) -> str:
    """A host as compared: case and a trailing dot dropped, an address in its one
    standard spelling (an IPv4-mapped IPv6 address as IPv4, ``127.1`` or ``0x7f.0.0.1``
    as ``127.0.0.1``), and every loopback alias :data:`LOOPBACK`."""
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    address = _address(host)
    if address is not None:
        host = str(address)
    return LOOPBACK if host in ALIASES else host


def is_address(host: str) -> bool:
    """Whether ``host`` is written as an address (any spelling), not a name."""
    return _address(host.strip().lower().rstrip(".").strip("[]")) is not None


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        found = ipaddress.ip_address(host)
    except ValueError:
        if not LEGACY_IPV4.fullmatch(host):
            return None
        try:  # the forms inet_aton (and so the resolver and curl) accept: 127.1, 0x7f.1
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped
    return found


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
    """A host's canonical addresses: an address as written (any spelling), a loopback
    alias, a name as it resolves (the name itself when it does not)."""
    found = canonical(host)
    if found == LOOPBACK or is_address(host):
        return {found}
    return {canonical(a) for a in look_up(found)} or {found}
