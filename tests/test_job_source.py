"""A job-identity source is one module plus one registry line (issue #32).

``tests/support/lease_jobs.py`` names GPUs 9 and 10 of the simulated node one job from a
made-up scheduler. Registered (the one line) with the built-in job collector off, the real
daemon publishes its identity on ``goodput_gpu_job_info`` and judges the two GPUs as one
job: GPU 9 (its host stalls it) is the straggler, GPU 10's waited seconds grow.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.harness import http_get, module_daemon


@pytest.fixture
def lease_daemon() -> Iterator[str]:
    with module_daemon("tests.support.lease_jobs", "--simulate", "--no-collector.jobs",
                       "--interval", "0.2", "--lease-gpu", "9", "--lease-gpu", "10") as url:
        yield url


def _jobs(url: str) -> list[tuple[str, dict[str, str], float]]:
    status, body = http_get(url + "/metrics", timeout=5)
    assert status == 200
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(body)
            for s in f.samples if s.name.startswith(("goodput_gpu_job", "goodput_job"))]


def test_a_new_identity_source_is_judged_like_any_other(lease_daemon: str) -> None:
    deadline = time.monotonic() + 40  # a straggler is named once it has held 10 s
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
    # the straggler's own small kernels are hollow (a sync loop): a little of it reads as
    # waiting, far less than its waiting peer's
    assert named == ["9"] and waited["9"] < waited["10"] / 5
