"""Run the real daemon (``python -m exporter``) as a subprocess on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.prometheus import free_port, wait_http

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def daemon(*args: str, log: Path | None = None, env: dict[str, str] | None = None) -> Iterator[str]:
    """Start the daemon with ``args``; yields its base URL once /healthz answers."""
    port = free_port()
    out = log.open("wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--listen", f"127.0.0.1:{port}", *args],
        cwd=REPO,
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/healthz", timeout=30)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        if log:
            out.close()  # type: ignore[union-attr]
