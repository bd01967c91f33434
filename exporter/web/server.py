"""The HTTP face of the daemon (aiohttp).

Handlers read the snapshot store only; none of them calls NVML or the network, so a wedged
GPU or a hung serving engine can never stall a scrape. /debug/state names every pod and
target of the node, so it is served to loopback clients only unless the web config's basic
auth admitted the request (docs/security.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from collections.abc import Callable
from typing import Any

from aiohttp import web

from exporter import runbooks
from exporter.metrics.cache import ExpositionCache, negotiate
from exporter.snapshot import SnapshotStore
from exporter.web.webconfig import AUTHENTICATED

Pages = Callable[[web.Application], None]
"""Adds the pages for people (the landing page at ``/``, ``/docs/``): built by the daemon
from ``exporter/view/page.py`` and handed in, so the web layer imports no view."""


def build_app(
    store: SnapshotStore,
    exposition: ExpositionCache,
    backend: str,
    middlewares: list[Any] | None = None,
    debug_state: bool = True,
    pages: Pages | None = None,
) -> web.Application:
    app = web.Application(middlewares=middlewares or [])

    async def metrics(request: web.Request) -> web.Response:
        variant = negotiate(request.headers.get("Accept"), request.headers.get("Accept-Encoding"))
        body = exposition.cached(variant)
        if body is None:  # not encoded yet for this snapshot: keep the event loop free
            body = await asyncio.get_running_loop().run_in_executor(
                None, exposition.body, variant
            )
        response = web.Response(body=body)
        response.headers["Content-Type"] = variant.content_type
        if variant.gzipped:
            response.headers["Content-Encoding"] = "gzip"
        response.headers["Vary"] = "Accept, Accept-Encoding"
        return response

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        reason = store.current.ready_reason
        if reason:
            return web.Response(status=503, text=f"not ready: {reason}\n")
        return web.Response(text="ready\n")

    async def state(request: web.Request) -> web.Response:
        if not (request.get(AUTHENTICATED) or is_loopback(request.remote)):
            return web.Response(
                status=403,
                text="/debug/state is sensitive: served to loopback clients, or to any client"
                " once the web config has basic_auth_users (docs/security.md)\n",
            )
        return web.Response(
            text=json.dumps(store.current.to_json(), indent=1, default=str),
            content_type="application/json",
        )

    if pages is not None:
        pages(app)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if debug_state:
        app.router.add_get("/debug/state", state)
    runbooks.add_routes(app)
    return app


def is_loopback(remote: str | None) -> bool:
    """Whether a request came from this host (127.0.0.0/8, ::1, IPv4-mapped loopback)."""
    try:
        address = ipaddress.ip_address((remote or "").split("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for ``--listen HOST:PORT``, bound before anything else starts so a
    taken port is the first and only thing the exporter says. Host "" listens on every
    address, IPv6 and IPv4 alike where the system allows one socket for both; a name listens
    on each of its addresses (port 0: the first, on a port the kernel picks)."""
    if not host:
        if socket.has_dualstack_ipv6():
            return [socket.create_server(("", port), family=socket.AF_INET6,
                                         dualstack_ipv6=True)]
        return [socket.create_server(("", port))]
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys((info[0], info[4][:2]) for info in found))
    sockets: list[socket.socket] = []
    try:
        for family, address in addresses[:1] if port == 0 else addresses:
            sockets.append(socket.create_server(address, family=family))
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def bind_ephemeral(host: str) -> socket.socket:
    """A listening socket on a port the kernel picks (``--listen HOST:0``)."""
    return bind(host, 0)[0]


def address_of(sock: socket.socket) -> str:
    """``HOST:PORT`` of a bound socket, IPv6 hosts in brackets."""
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
