"""A job-identity source is one module plus one registry line (issue #32).

``tests/support/lease_jobs.py`` names GPUs 9 and 10 of the simulated node one job from a
made-up scheduler. Registered (the one line) with the built-in job collector off, the real
daemon publishes its identity on ``goodput_gpu_job_info`` and judges the two GPUs as one
job: GPU 9 (its host stalls it) is the straggler, GPU 10's waited seconds grow.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.harness import REPO, child_env, free_port, http_get, stop_process, wait_http

LAUNCH = [sys.executable, "-m", "tests.support.lease_jobs"]


@pytest.fixture
def lease_daemon() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [*LAUNCH, "--simulate", "--no-collector.jobs", "--listen", f"127.0.0.1:{port}",
         "--interval", "0.2", "--lease-gpu", "9", "--lease-gpu", "10"],
        cwd=REPO, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/readyz", timeout=30)
        yield url
    finally:
        stop_process(proc)


def _jobs(url: str) -> list[tuple[str, dict[str, str], float]]:
    status, body = http_get(url + "/metrics", timeout=5)
    assert status == 200
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(body)
            for s in f.samples if s.name.startswith(("goodput_gpu_job", "goodput_job"))]


def test_a_new_identity_source_is_judged_like_any_other(lease_daemon: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        jobs = _jobs(lease_daemon)
        named = [labels["gpu"] for name, labels, v in jobs if name == "goodput_job_straggler"]
        waited = {labels["gpu"]: v for name, labels, v in jobs
                  if name == "goodput_gpu_job_wait_seconds_total"}
        if named and waited.get("10", 0) > 0:
            break
        assert time.monotonic() < deadline, jobs
        time.sleep(0.2)
    info = {labels["gpu"]: (labels["job_source"], labels["job_id"])
            for name, labels, _ in jobs if name == "goodput_gpu_job_info"}
    assert info == {"9": ("lease", "lease-7"), "10": ("lease", "lease-7")}
    assert named == ["9"] and waited["9"] == 0
