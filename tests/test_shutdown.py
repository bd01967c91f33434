"""SIGTERM stops the daemon gracefully: it exits 0 and releases NVML."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.conftest import REPO
from tests.support.prometheus import free_port, wait_http


def test_sigterm_is_a_clean_exit(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--simulate", "--listen", f"127.0.0.1:{port}"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", timeout=30)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out.decode()
    assert b'"event": "stopped"' in out
