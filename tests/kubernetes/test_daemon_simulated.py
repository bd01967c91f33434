"""Issue #5's acceptance, end to end through the real daemon: ``python -m exporter
--simulate --kubernetes`` against the kubelet stand-in on a unix socket (its own process),
scraped over HTTP. Every holder of a GPU has its ``goodput_gpu_pod_info`` series (two pods
time-slicing a GPU: two series); a missing socket leaves the GPU metrics flowing with
``goodput_attribution_available`` 0 and the reason, logged once."""

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

from testkit.kubelet import simulated_node_pods
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
        [sys.executable, "-m", "testkit.kubelet", str(path)],
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


def expected_holders() -> set[tuple[str, str, str, str]]:
    """(uuid, namespace, pod, container) for every device the stand-in hands out."""
    return {
        (device_id.split("::")[0], p.namespace, p.name, c.name)
        for p in simulated_node_pods()
        for c in p.containers
        for d in c.devices
        for device_id in d.device_ids
    }


def pod_info(samples: list[Sample]) -> set[tuple[str, str, str, str]]:
    """goodput_gpu_pod_info as (uuid, namespace, pod, container), joined with
    goodput_gpu_info on gpu as PromQL would."""
    uuid = {lbl["gpu"]: lbl["uuid"] for name, lbl, _ in samples if name == "goodput_gpu_info"}
    return {
        (uuid.get(lbl["gpu"], "?"), lbl["namespace"], lbl["pod"], lbl["container"])
        for name, lbl, _ in samples
        if name == "goodput_gpu_pod_info"
    }


def test_every_assigned_gpu_of_the_simulated_node_has_its_pods(
    standin: str, tmp_path: Path
) -> None:
    expected = expected_holders()
    args = (
        "--simulate",
        "--simulate-gpus",
        "8",
        "--kubernetes",
        "--kubelet-socket",
        standin,
        "--kubelet-interval",
        "0.5",
        "--proc-root",
        str(tmp_path),
    )
    with daemon(*args, env={"NODE_NAME": "node-under-test"}) as url:
        # The kubelet's first answer may come before the GPU source's first poll (nothing
        # to match yet); from the next kubelet poll on, every holder has its series.
        deadline = time.monotonic() + 20
        while True:
            samples = scrape(url)
            found = pod_info(samples)
            if attribution(samples, "kubelet") == (1.0, "") and found == expected:
                break
            assert time.monotonic() < deadline, sorted(found ^ expected)[:5]
            time.sleep(0.3)
    infos = [lbl for name, lbl, _ in samples if name == "goodput_gpu_pod_info"]
    assert {lbl["node"] for lbl in infos} == {"node-under-test"}
    assert {lbl["job_name"] for lbl in infos} == {""}  # pod-resources carries no pod labels
    # the time-sliced GPU 4 has one series per pod
    assert sorted(lbl["pod"] for lbl in infos if lbl["gpu"] == "4") == ["embed-a", "embed-b"]
    # every other per-GPU series carries only its own labels, no pod labels (the job series
    # carry the job key, whose namespace is the pod's for a Kubernetes job)
    for name, lbl, _ in samples:
        if "gpu" in lbl and not name.startswith(
            ("goodput_gpu_pod_", "goodput_gpu_job_", "goodput_job_")
        ):
            assert not {"namespace", "pod", "container"} & set(lbl), (name, lbl)


def kubelet_failures(samples: list[Sample], reason: str) -> float:
    return sum(
        v
        for name, lbl, v in samples
        if name == "goodput_exporter_source_errors_total"
        and lbl.get("source") == "kubelet"
        and lbl.get("reason") == reason
    )


def test_missing_kubelet_socket_keeps_gpu_metrics_and_says_why(tmp_path: Path) -> None:
    log = tmp_path / "daemon.log"
    args = (
        "--simulate",
        "--simulate-gpus",
        "8",
        "--kubernetes",
        "--kubelet-socket",
        str(tmp_path / "missing.sock"),
        "--kubelet-interval",
        "0.5",
        "--proc-root",
        str(tmp_path),
    )
    with daemon(*args, log=log) as url:
        deadline = time.monotonic() + 20
        while attribution(samples := scrape(url), "kubelet") != (0.0, "socket_missing"):
            assert time.monotonic() < deadline, attribution(samples, "kubelet")
            time.sleep(0.1)
        # a few more failed kubelet polls: still one log line
        while kubelet_failures(samples := scrape(url), "socket_missing") < 4:
            assert time.monotonic() < deadline, kubelet_failures(samples, "socket_missing")
            time.sleep(0.2)
    memory = [lbl for n, lbl, _ in samples if n == "goodput_gpu_memory_used_bytes"]
    assert len(memory) == 8
    assert not [n for n, _, _ in samples if n == "goodput_gpu_pod_info"]
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    failed = [e for e in events if e.get("event") == "source_failed" and e["source"] == "kubelet"]
    assert len(failed) == 1
    assert failed[0]["reason"] == "socket_missing"


@pytest.fixture
def api_server() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server answering GET /api/v1/pods like the API server."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str] = []
    items = [
        {"metadata": {"namespace": p.namespace, "name": p.name, "labels": labels}}
        for p in simulated_node_pods()
        for labels in [
            {"batch.kubernetes.io/job-name": "train"} if p.name.startswith("trainer-") else {}
        ]
    ]
    body = json.dumps({"kind": "PodList", "items": items}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_pod_labels_fill_job_name(
    standin: str, api_server: tuple[str, list[str]], tmp_path: Path
) -> None:
    url_api, seen = api_server
    token = tmp_path / "token"
    token.write_text("t")
    args = (
        "--simulate",
        "--simulate-gpus",
        "8",
        "--kubernetes",
        "--kubernetes-pod-labels",
        "--kubelet-socket",
        standin,
        "--kubelet-interval",
        "0.5",
        "--proc-root",
        str(tmp_path),
    )
    env = {
        "NODE_NAME": "node-under-test",
        "GOODPUT_KUBERNETES__API_SERVER": url_api,
        "GOODPUT_KUBERNETES__TOKEN_PATH": str(token),
        "GOODPUT_KUBERNETES__POD_LABELS_INTERVAL": "0.5",
    }
    with daemon(*args, env=env) as url:
        deadline = time.monotonic() + 20
        while True:
            samples = scrape(url)
            jobs = {
                lbl["pod"]: lbl["job_name"]
                for name, lbl, _ in samples
                if name == "goodput_gpu_pod_info"
            }
            if attribution(samples, "pod_labels") == (1.0, "") and jobs.get("trainer-1"):
                break
            assert time.monotonic() < deadline, (attribution(samples, "pod_labels"), jobs)
            time.sleep(0.3)
    assert jobs["trainer-0"] == jobs["trainer-1"] == "train"
    assert jobs["notebook"] == ""
    assert seen[0] == "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-under-test"
