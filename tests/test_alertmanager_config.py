"""alerts/alertmanager.example.yml: amtool accepts it, routes as documented, and a real
Alertmanager applies its inhibitions."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.prometheus import free_port, require, wait_http

CONFIG = Path(__file__).resolve().parent.parent / "alerts" / "alertmanager.example.yml"

# (labels of an alert, receiver it must reach)
ROUTES = [
    ({"alertname": "GPULost", "severity": "critical", "node": "n1", "gpu": "7"}, "gpu-oncall"),
    ({"alertname": "GPUBusyButUnproductive", "severity": "warning", "node": "n1"}, "gpu-team"),
    ({"alertname": "GPULowGoodputVsFleet", "severity": "info"}, "gpu-tickets"),
    ({"alertname": "SomethingElse"}, "gpu-team"),
]


def amtool(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require("amtool"), *argv], capture_output=True, text=True,
                          timeout=30, check=False)


def test_amtool_check_config() -> None:
    result = amtool("check-config", str(CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("labels", "receiver"), ROUTES, ids=[r[1] + "-" + str(i)
                                                               for i, r in enumerate(ROUTES)])
def test_route(labels: dict[str, str], receiver: str) -> None:
    pairs = [f"{k}={v}" for k, v in labels.items()]
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}",
                    f"--verify.receivers={receiver}", *pairs)
    assert result.returncode == 0, result.stdout + result.stderr


def test_route_mismatch_is_detected() -> None:
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}",
                    "--verify.receivers=gpu-oncall", "severity=warning")
    assert result.returncode != 0


def _post(url: str, alerts: list[dict[str, Any]]) -> None:
    req = urllib.request.Request(f"{url}/api/v2/alerts", data=json.dumps(alerts).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def _states(url: str) -> dict[tuple[str, str, str], list[str]]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as resp:
        body = json.load(resp)
    return {(a["labels"]["alertname"], a["labels"].get("node", ""), a["labels"].get("gpu", "")):
            a["status"]["inhibitedBy"] for a in body}


@pytest.mark.integration
def test_inhibitions_in_real_alertmanager(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [require("prometheus-alertmanager"), f"--config.file={CONFIG}",
         f"--storage.path={tmp_path}", f"--web.listen-address=127.0.0.1:{port}",
         "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"{url}/-/ready")
        _post(url, [
            {"labels": {"alertname": "GPULost", "severity": "critical", "node": "n1", "gpu": "7"}},
            {"labels": {"alertname": "GPUBusyButUnproductive", "severity": "warning",
                        "node": "n1", "gpu": "7"}},
            {"labels": {"alertname": "GPUBusyButUnproductive", "severity": "warning",
                        "node": "n1", "gpu": "5"}},
            {"labels": {"alertname": "GoodputExporterDown", "severity": "critical",
                        "node": "n2"}},
            {"labels": {"alertname": "GPUThermalThrottling", "severity": "warning",
                        "node": "n2", "gpu": "0"}},
        ])
        expected = {("GPUBusyButUnproductive", "n1", "7"), ("GPUThermalThrottling", "n2", "0")}
        deadline = time.monotonic() + 15
        while True:
            states = _states(url)
            inhibited = {k for k, v in states.items() if v}
            if len(states) == 5 and inhibited == expected:
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.integration
def test_lost_gpu_makes_one_notification(tmp_path: Path) -> None:
    """While GPULost fires for a GPU, the alerts a lost GPU also raises (its profiling
    alerts, the node's GPU-source errors and staleness) are inhibited: only GPULost is
    notified. A serving-source error on the same node and a lost GPU's neighbour are not."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [require("prometheus-alertmanager"), f"--config.file={CONFIG}",
         f"--storage.path={tmp_path}", f"--web.listen-address=127.0.0.1:{port}",
         "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    node = {"node": "n1"}
    try:
        wait_http(f"{url}/-/ready")
        _post(url, [
            {"labels": {"alertname": "GPULost", "severity": "critical", **node, "gpu": "7"}},
            {"labels": {"alertname": "GPUProfilingUnavailable", "severity": "warning", **node,
                        "gpu": "7", "source": "gpm"}},
            {"labels": {"alertname": "GPUProfilingStale", "severity": "warning", **node,
                        "gpu": "7"}},
            {"labels": {"alertname": "GoodputExporterSourceErrors", "severity": "warning",
                        **node, "source": "nvml"}},
            {"labels": {"alertname": "GoodputExporterStale", "severity": "warning", **node,
                        "source": "gpm"}},
            {"labels": {"alertname": "GoodputExporterSourceErrors", "severity": "warning",
                        **node, "source": "serving"}},
            {"labels": {"alertname": "GPUProfilingStale", "severity": "warning", **node,
                        "gpu": "6"}},
        ])
        deadline = time.monotonic() + 15
        while True:
            with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as resp:
                body = json.load(resp)
            active = {(a["labels"]["alertname"], a["labels"].get("gpu", ""),
                       a["labels"].get("source", ""))
                      for a in body if not a["status"]["inhibitedBy"]}
            if len(body) == 7 and active == {("GPULost", "7", ""),
                                             ("GoodputExporterSourceErrors", "", "serving"),
                                             ("GPUProfilingStale", "6", "")}:
                break
            assert time.monotonic() < deadline, active
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)
