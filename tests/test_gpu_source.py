"""A GPU source is one module plus one registry line (issue #32).

``tests/support/second_vendor.py`` is a whole second GPU vendor: its settings section and
flag, a ``GpuReading``, a source and a family. Added to a scratch copy of the package as a
contributor would (``exporter/collectors/vendor.py`` and its registry line), the real daemon
runs it with every NVML collector off on this machine, which has no NVIDIA driver: it gets
ready on the vendor's first poll, the model judges the vendor's two GPUs from their windows,
and their own family and the vendor-neutral GPU series are served. Its flag, environment
variable and config key come from its section.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.readings import Device, GpuState, NvmlReading
from exporter.snapshot import SnapshotStore, SourceResult
from testkit.harness import http_get, module_daemon
from tests.support import scratch, second_vendor

NVML_OFF = ("--no-collector.nvml", "--no-collector.xid", "--no-collector.profiling")


@pytest.fixture(scope="module")
def vendor_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package with the vendor added: one module, one registry line."""
    return scratch.checkout(tmp_path_factory.mktemp("vendor"),
                            {second_vendor.NAME: Path(second_vendor.__file__)})


@pytest.fixture
def vendor_daemon(vendor_root: Path) -> Iterator[str]:
    with module_daemon("exporter", *NVML_OFF, "--interval", "0.2",
                       "--vendor-interval", "0.2", root=vendor_root) as url:
        yield url


def _samples(url: str) -> dict[tuple[str, str, str], float]:
    """(name, gpu, regime) -> value of every sample of the vendor's GPUs."""
    status, body = http_get(url + "/metrics", timeout=5)
    assert status == 200
    return {
        (s.name, s.labels.get("gpu", ""), s.labels.get("regime", "")): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.labels.get("gpu", "").startswith("v")
    }


def test_the_model_judges_a_second_vendors_gpus_without_nvml(vendor_daemon: str) -> None:
    deadline = time.monotonic() + 20
    while True:  # the regime is debounced: enter_windows polls of 0.2 s
        samples = _samples(vendor_daemon)
        if samples.get(("goodput_gpu_regime", "v1", "idle")) == 1:
            break
        assert time.monotonic() < deadline, samples
        time.sleep(0.2)
    # the busy GPU has no profiling counters: the model says so rather than guess
    assert samples[("goodput_gpu_regime", "v0", "unknown")] == 1
    assert samples[("goodput_vendor_power_watts", "v0", "")] == 450.0
    assert samples[("goodput_vendor_power_watts", "v1", "")] == 60.0
    # and the vendor-neutral series every alert and dashboard keys on, NVML off
    assert samples[("goodput_gpu_utilization_ratio", "v0", "")] == 0.97
    assert samples[("goodput_gpu_power_watts", "v1", "")] == 60.0
    assert samples[("goodput_gpu_info", "v1", "")] == 1


def test_its_flag_env_name_and_help_come_from_its_section(vendor_root: Path) -> None:
    def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return scratch.run(vendor_root, "-m", "exporter", *args, extra=env)

    out = _run("--help").stdout
    assert "--vendor-interval SECONDS" in out and "[GOODPUT_VENDOR__INTERVAL]" in out
    assert "Seconds between polls of the test vendor's GPUs" in out
    bad = _run(*NVML_OFF, "--vendor-interval", "0")
    assert bad.returncode == 2 and "'vendor.interval'" in bad.stderr, bad.stderr
    env = _run(*NVML_OFF, env={"GOODPUT_VENDOR__INTERVAL": "-1"})
    assert env.returncode == 2 and "'vendor.interval'" in env.stderr, env.stderr


def test_the_snapshot_lists_every_gpu_sources_devices() -> None:
    store = SnapshotStore("n")
    store.wait_for(["nvml", "vendor"])
    nvml = NvmlReading((Device("0", "GPU-0"),), {"0": GpuState(utilization=0.5)})
    store.publish(SourceResult(source="nvml", reading=nvml))
    reading = second_vendor.VendorReading(second_vendor.DEVICES, second_vendor.STATES)
    snap = store.publish(SourceResult(source="vendor", reading=reading))
    assert [d.gpu for d in snap.inventory] == ["0", "v0", "v1"]
    assert set(snap.gpu_states) == {"0", "v0", "v1"}
    assert snap.ready_reason == ""
