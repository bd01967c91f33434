"""The one start-up line a person reads: what was found and the URL to open.

Logged once the first poll round has answered (or after ``WAIT_SECONDS``), so every
start-up error comes before it and it can name the profiling source each GPU got. The
per-GPU detail behind it (GPM support, source selection) is logged at debug.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from exporter import __version__, collectors
from exporter.snapshot import Snapshot
from exporter.wiring.config import Settings

WAIT_SECONDS = 5.0
log = structlog.get_logger("main")


def url_for(sock: socket.socket, tls: bool) -> str:
    """The URL a person opens: a wildcard address names this host instead."""
    host, port = sock.getsockname()[:2]
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}/"


def profiling_words(snap: Snapshot) -> str:
    """``gpm on 12 GPUs`` / ``dcgm on 2 GPUs, none on 1 (unsupported)``."""
    found: Counter[str] = Counter()
    for device in snap.inventory:
        status = snap.profiling(device.gpu)
        if status is None:
            found["pending"] += 1
        elif status.available:
            found[status.backend] += 1
        else:
            found[f"none ({status.reason or 'unavailable'})"] += 1
    parts = [f"{name} on {n} GPU{'s' if n != 1 else ''}" for name, n in found.most_common()]
    return ", ".join(parts) or "no GPUs"


def summary(settings: Settings, snap: Snapshot, backend: str, url: str) -> dict[str, Any]:
    """The fields of the start-up line, every value a word or a number."""
    return {
        "url": url,
        "gpus": len(snap.inventory),
        "backend": backend,
        "profiling": profiling_words(snap),
        **collectors.words(settings),  # each collector's own: serving_targets, kubernetes
        "node": snap.node_name,
        "version": __version__,
        "top": f"{top_command()} --url {url}metrics",
    }


def top_command() -> str:
    """How this install runs ``top``, as a person would type it in this directory: the
    script on PATH, else the one beside this interpreter (``.venv/bin/...`` of a checkout's
    ``make run``, whose venv nothing activates), else this interpreter with ``-m``."""
    if shutil.which("gpu-goodput-exporter") is not None:
        return "gpu-goodput-exporter top"
    script = Path(sys.executable).parent / "gpu-goodput-exporter"
    if script.is_file():
        try:
            return f"{script.relative_to(Path.cwd())} top"
        except ValueError:
            return f"{script} top"
    return f"{sys.executable} -m exporter top"


def _settled(snap: Snapshot) -> bool:
    return not snap.ready_reason and all(
        snap.profiling(d.gpu) is not None for d in snap.inventory
    )


def announcer(
    settings: Settings, current: Callable[[], Snapshot], backend: str,
    sockets: Sequence[socket.socket], tls: bool,
) -> Callable[[web.Application], Awaitable[None]]:
    """An on_startup hook that logs the start-up line once the first polls have answered."""

    async def wait_and_log() -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_SECONDS
        while not _settled(current()) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        url = url_for(sockets[0], tls)
        log.info("started", **summary(settings, current(), backend, url))

    async def hook(app: web.Application) -> None:
        app[STARTUP_TASK] = asyncio.get_running_loop().create_task(wait_and_log())

    return hook


STARTUP_TASK = web.AppKey("startup_line", asyncio.Task)
