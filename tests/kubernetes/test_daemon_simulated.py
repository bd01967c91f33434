"""Issue #5's acceptance, end to end through the real daemon: ``python -m exporter
--simulate --kubernetes`` against the kubelet stand-in on a unix socket (its own process),
scraped over HTTP. Every per-GPU series carries its pod; a missing socket leaves the GPU
metrics flowing with ``goodput_attribution_available`` 0 and the reason, logged once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.kubernetes.kubelet_standin import simulated_node_pods
from tests.support.daemon import REPO, daemon

Sample = tuple[str, dict[str, str], float]


def scrape(url: str) -> list[Sample]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def attribution(samples: list[Sample], source: str) -> tuple[float, str] | None:
    for name, labels, value in samples:
        if name == "goodput_attribution_available" and labels["source"] == source:
            return value, labels["reason"]
    return None


@pytest.fixture
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("kd") / "kubelet.sock"  # unix paths: 107 bytes at most
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.kubernetes.kubelet_standin", str(path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        while not path.exists():
            assert proc.poll() is None, "kubelet stand-in exited"
            assert time.monotonic() < deadline, "kubelet stand-in never created its socket"
            time.sleep(0.05)
        yield str(path)
    finally:
        proc.terminate()
        proc.wait(10)


def test_every_per_gpu_series_of_the_simulated_node_carries_its_pod(
    standin: str, tmp_path: Path
) -> None:
    expected: dict[str, tuple[str, str, str]] = {}
    holders: dict[str, list[tuple[str, str, str]]] = {}
    for p in simulated_node_pods():
        for c in p.containers:
            for d in c.devices:
                for device_id in d.device_ids:
                    uuid = device_id.split("::")[0]
                    holders.setdefault(uuid, []).append((p.namespace, p.name, c.name))
    for uuid, found in holders.items():
        cols = list(zip(*sorted(set(found)), strict=True))
        expected[uuid] = (",".join(cols[0]), ",".join(cols[1]), ",".join(cols[2]))
    args = ("--simulate", "--kubernetes", "--kubelet-socket", standin,
            "--kubelet-interval", "0.5", "--proc-root", str(tmp_path))
    with daemon(*args, env={"NODE_NAME": "node-under-test"}) as url:
        # The kubelet's first answer may come before the GPU source's first poll (nothing
        # to match yet); from the next kubelet poll on, every series must be labelled.
        deadline = time.monotonic() + 20
        while True:
            samples = scrape(url)
            wrong = mislabelled(samples, expected)
            if attribution(samples, "kubelet") == (1.0, "") and not wrong:
                break
            assert time.monotonic() < deadline, wrong[:5]
            time.sleep(0.3)
    per_gpu = [lbl for _, lbl, _ in samples if "uuid" in lbl and "gpu" in lbl]
    assert len({lbl["uuid"] for lbl in per_gpu}) == 8
    assert {lbl["node"] for lbl in per_gpu} == {"node-under-test"}


def mislabelled(
    samples: list[Sample], expected: dict[str, tuple[str, str, str]]
) -> list[tuple[str, dict[str, str]]]:
    """Per-GPU series whose namespace/pod/container differ from the kubelet's assignment;
    a GPU no pod holds keeps the label names with empty values (stable series identity)."""
    return [
        (name, lbl)
        for name, lbl, _ in samples
        if "uuid" in lbl and "gpu" in lbl
        and (lbl.get("namespace"), lbl.get("pod"), lbl.get("container"))
        != expected.get(lbl["uuid"], ("", "", ""))
    ]


def test_missing_kubelet_socket_keeps_gpu_metrics_and_says_why(tmp_path: Path) -> None:
    log = tmp_path / "daemon.log"
    args = ("--simulate", "--kubernetes", "--kubelet-socket", str(tmp_path / "missing.sock"),
            "--kubelet-interval", "0.5", "--proc-root", str(tmp_path))
    with daemon(*args, log=log) as url:
        deadline = time.monotonic() + 20
        while attribution(samples := scrape(url), "kubelet") != (0.0, "socket_missing"):
            assert time.monotonic() < deadline, attribution(samples, "kubelet")
            time.sleep(0.3)
        time.sleep(1.5)  # a few more failed kubelet polls: still one log line
    memory = [lbl for n, lbl, _ in samples if n == "goodput_gpu_memory_used_bytes"]
    assert len(memory) == 8
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    failed = [e for e in events if e.get("event") == "source_failed" and e["source"] == "kubelet"]
    assert len(failed) == 1
    assert failed[0]["reason"] == "socket_missing"
