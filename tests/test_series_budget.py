"""The default series budget ([footprint]): at most 40 series per GPU (besides the attribution
info series, one per holder), and bytes per scrape on the simulated 8-GPU node within 40 KB
plain and 8 KB gzip.

Run against the real daemon on the simulated node once every source has published (NVML,
GPM profiling, the model), so every default family is present. A family added to the default
set that breaks the budget fails here; put it behind ``--extended-metrics`` or drop another.
"""

from __future__ import annotations

import gzip
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.daemon import DaemonProcess

BUDGET_PER_GPU = 40
MAX_PLAIN_BYTES = 40_000
MAX_GZIP_BYTES = 8_000
GPUS = 8


def _get(url: str, gzip_ok: bool = False) -> bytes:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return bytes(response.read())


ATTRIBUTION = ("goodput_gpu_job_info", "goodput_gpu_pod_info")
"""Who holds the GPU, one series per holder: not counted (docs/metrics.md says so)."""


def _series_per_gpu(text: str) -> Counter[str]:
    per_gpu: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        if family.name in ATTRIBUTION:
            continue
        for sample in family.samples:
            gpu = sample.labels.get("gpu")
            if gpu:
                per_gpu[gpu] += 1
    return per_gpu


def _complete(text: str) -> bool:
    """Every source has published: profiling counters and the model's verdict per GPU."""
    return all(
        text.count(f"{name}{{") >= GPUS
        for name in ("goodput_gpu_sm_active_seconds_total", "goodput_gpu_regime")
    )


@pytest.fixture(scope="module")
def node() -> Iterator[str]:
    proc = DaemonProcess("--simulate", "--simulate-gpus", str(GPUS), "--interval", "0.5")
    proc.start()
    try:
        deadline = time.monotonic() + 30
        while not _complete(_get(proc.url + "/metrics").decode()):
            assert time.monotonic() < deadline, "the sources never all published"
            time.sleep(0.2)
        yield proc.url
    finally:
        proc.stop()


def test_default_series_per_gpu_within_budget(node: str) -> None:
    per_gpu = _series_per_gpu(_get(node + "/metrics").decode())
    assert len(per_gpu) == GPUS
    over = {gpu: n for gpu, n in per_gpu.items() if n > BUDGET_PER_GPU}
    assert not over, f"series per GPU over the budget of {BUDGET_PER_GPU}: {over}"


def test_bytes_per_scrape_within_budget(node: str) -> None:
    plain = _get(node + "/metrics")
    zipped = _get(node + "/metrics", gzip_ok=True)
    assert gzip.decompress(zipped).startswith(b"# HELP")
    assert len(plain) <= MAX_PLAIN_BYTES, len(plain)
    assert len(zipped) <= MAX_GZIP_BYTES, len(zipped)


def test_extended_metrics_bring_back_the_optional_families() -> None:
    proc = DaemonProcess("--simulate", "--simulate-gpus", "1", "--extended-metrics")
    proc.start()
    try:
        deadline = time.monotonic() + 30
        while "goodput_gpu_clock_max_hertz{" not in (text := _get(proc.url + "/metrics").decode()):
            assert time.monotonic() < deadline, "no optional family appeared"
            time.sleep(0.2)
        assert "goodput_gpu_memory_controller_utilization_ratio{" in text
    finally:
        proc.stop()
