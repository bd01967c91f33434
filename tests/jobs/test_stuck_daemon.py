"""The daemon with a /proc read that never returns ([identity], issue 38): the jobs source
still publishes up, last-success and its errors from its first poll, the other GPUs keep
their jobs, and SIGTERM ends the process within the stated bound (docs/security.md, "Reads
that never return") although the reading thread never comes back."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from exporter.sim.fake_proc import write_proc
from exporter.sim.patterns import NODE as SIM_NODE
from testkit.harness import DaemonProcess, http_get
from tests.conftest import REPO

SHUTDOWN_BOUND = 10.0
"""docs/security.md: aiohttp's 5 s for open connections, then at most 3 s to exit."""
STUCK_PID = 4102  # GPU 2's process (compute_gemm, a process session)


def _metrics(url: str) -> str:
    status, body = http_get(url + "/metrics", timeout=5)
    assert status == 200
    return body


@pytest.mark.parametrize("kind", ["fifo", "sleep"])
def test_a_read_stuck_forever_neither_hides_the_source_nor_holds_sigterm(
    tmp_path: Path, kind: str
) -> None:
    root = tmp_path / "proc"
    write_proc(str(root))
    environ = root / str(STUCK_PID) / "environ"
    env = {}
    if kind == "fifo":
        environ.unlink()
        os.mkfifo(environ)
    else:
        env["GOODPUT_TEST_STUCK_READS"] = str(environ)
    reason = "read_not_regular" if kind == "fifo" else "read_timeout"
    daemon = DaemonProcess(
        "--simulate", "--node-name", "simnode", "--proc-root", str(root),
        "--jobs-interval", "0.5",
        python=f"{sys.executable} {REPO / 'tests' / 'support' / 'stuck_reads.py'}",
        env=env, log=tmp_path / "daemon.log",
    )
    daemon.start()
    try:
        deadline, body = time.monotonic() + 20, ""
        counted = f'reason="{reason}",source="jobs_proc"}} 1.0'
        while time.monotonic() < deadline and not (
            counted in body and 'job_id="4242"' in body
        ):
            time.sleep(0.3)
            body = _metrics(daemon.url)
        assert counted in body, body[-3000:]
        assert 'goodput_exporter_source_up{node="simnode",source="jobs_proc"} 1.0' in body
        stuck = 1 if kind == "sleep" else 0  # a FIFO is refused at once, never stuck
        assert ('goodput_exporter_source_reads_stuck{node="simnode",source="jobs_proc"} '
                f"{stuck}.0") in body
        assert 'goodput_exporter_last_success_timestamp_seconds{node="simnode",' \
               'source="jobs_proc"}' in body
        info = [line for line in body.splitlines() if line.startswith("goodput_gpu_job_info{")]
        slurm = [str(i) for i, w in enumerate(SIM_NODE) if dict(w.job).get("SLURM_JOB_ID")]
        for gpu in slurm:  # the other tenants keep their jobs
            assert any(f'gpu="{gpu}"' in line and 'job_id="4242"' in line for line in info)
        assert not any('gpu="2"' in line for line in info)  # the stuck process: skipped
    finally:
        started = time.monotonic()
        code, killed = daemon.stop(timeout=SHUTDOWN_BOUND)
        took = time.monotonic() - started
    log = (tmp_path / "daemon.log").read_text()
    assert not killed and code == 0, log[-2000:]
    assert took < SHUTDOWN_BOUND
    assert '"event": "stopped"' in log
