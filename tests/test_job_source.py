"""A job-identity source is one module plus one registry line (issues #32, #41).

``tests/support/lease_jobs.py`` names GPUs 9 and 10 of the simulated node one job from a
made-up scheduler. Added to a scratch copy of the package the way a contributor adds it (the
module as ``exporter/collectors/lease.py``, its name in ``exporter/settings/names.py``;
nothing patched at run time), the real daemon publishes its identity on
``goodput_gpu_job_info``, over the Slurm job the built-in job collector reads for the same
GPUs (by the strength it declares, no list edited), and judges the two GPUs as one job:
GPU 9 (its host stalls it) is the straggler, GPU 10's waited seconds grow. The checks of
``make test`` that a new collector meets (the generated settings reference, the import
structure) pass on that copy.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.harness import http_get, module_daemon
from tests import test_import_structure as structure
from tests.support import lease_jobs, scratch


@pytest.fixture(scope="module")
def lease_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scratch.checkout(tmp_path_factory.mktemp("lease"),
                            {lease_jobs.NAME: Path(lease_jobs.__file__)})


@pytest.fixture
def lease_daemon(lease_root: Path) -> Iterator[str]:
    with module_daemon("exporter", "--simulate", "--interval", "0.2", "--lease-gpu", "9",
                       "--lease-gpu", "10", root=lease_root) as url:
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
        info = {labels["gpu"]: (labels["job_source"], labels["job_id"])
                for name, labels, _ in jobs if name == "goodput_gpu_job_info"}
        if named and waited.get("10", 0) > 0 and "process" in {s for s, _ in info.values()}:
            break
        assert time.monotonic() < deadline, (named, waited, info)
        time.sleep(0.2)
    # the lease outranks the Slurm job the job collector reads for GPUs 9 and 10
    assert info["9"] == ("lease", "lease-7") and info["10"] == ("lease", "lease-7")
    # the straggler's own small kernels are hollow (a sync loop): a little of it reads as
    # waiting, far less than its waiting peer's
    assert named == ["9"] and waited["9"] < waited["10"] / 5


def test_make_tests_checks_pass_with_it(lease_root: Path) -> None:
    """Its section regenerates docs/settings.md (a generated file); then the generated
    references check clean, and the import structure holds with the new module."""
    assert scratch.run(lease_root, "-m", "exporter.docgen.settings").returncode == 0
    for check in ("exporter.docgen.settings", "exporter.docgen.metrics"):
        done = scratch.run(lease_root, "-m", check, "--check")
        assert done.returncode == 0, done.stdout + done.stderr
    assert scratch.changed(lease_root) == [
        "docs/settings.md", "exporter/collectors/lease.py", "exporter/settings/names.py"]
    assert "lease.gpus" in (lease_root / "docs" / "settings.md").read_text() or \
        "--lease-gpu" in (lease_root / "docs" / "settings.md").read_text()
    edges = structure.graph(lease_root)
    assert "exporter.collectors.lease" in edges
    assert not structure.circles(edges) and not structure.uphill(edges)
    probe = ("import sys, exporter.wiring.config; print(sorted(m for m in sys.modules "
             "if m.startswith(('exporter.sources.jobs.procfs', 'grpc', 'aiohttp'))))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=lease_root, text=True,
                         env=scratch.env(lease_root), capture_output=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
