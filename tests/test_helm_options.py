"""The chart options people expect next to dcgm-exporter's chart (Service type, port,
internalTrafficPolicy, namespaceOverride, relabelings, labels on every object), and the
scrape monitors' handling of the exporter pod's own target labels, checked on the rendered
chart and, for the relabelings, in a real Prometheus."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import VALUE_SETS, by_kind, helm, manifests, one
from tests.support.prometheus import free_port, require, wait_http

OPTIONS = VALUE_SETS["service-options"]
EXPORTER_POD_LABELS = {"namespace", "pod", "container"}


def test_common_labels_on_every_object_pods_included() -> None:
    labels = OPTIONS["commonLabels"]
    objs = manifests(OPTIONS)
    assert {o["kind"] for o in objs} >= {"DaemonSet", "Service", "ServiceMonitor", "PodMonitor",
                                         "ConfigMap", "ServiceAccount", "ClusterRole",
                                         "ClusterRoleBinding", "NetworkPolicy", "Secret",
                                         "PrometheusRule"}
    for obj in objs:
        assert labels.items() <= obj["metadata"]["labels"].items(), obj["kind"]
    pod = one(objs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert labels.items() <= pod.items()


def test_namespace_override_moves_every_namespaced_object() -> None:
    ns = OPTIONS["namespaceOverride"]
    objs = manifests(OPTIONS)
    namespaced = [o for o in objs if o["kind"] not in {"ClusterRole", "ClusterRoleBinding"}]
    assert {"PrometheusRule", "ConfigMap", "DaemonSet"} <= {o["kind"] for o in namespaced}
    assert {o["metadata"]["namespace"] for o in namespaced} == {ns}
    assert one(objs, "ServiceMonitor")["spec"]["namespaceSelector"]["matchNames"] == [ns]
    assert one(objs, "PodMonitor")["spec"]["namespaceSelector"]["matchNames"] == [ns]
    (subject,) = one(objs, "ClusterRoleBinding")["subjects"]
    assert subject["namespace"] == ns


def test_service_defaults_stay_headless() -> None:
    spec = one(manifests(), "Service")["spec"]
    assert spec["type"] == "ClusterIP"
    assert spec["clusterIP"] == "None"
    assert "internalTrafficPolicy" not in spec
    assert spec["ports"] == [{"name": "metrics", "port": 9433, "targetPort": "metrics",
                              "protocol": "TCP"}]


def test_service_type_port_policy_and_annotations() -> None:
    svc = one(manifests(OPTIONS), "Service")
    assert svc["metadata"]["annotations"] == {"a.example/x": "y"}
    spec = svc["spec"]
    assert spec["type"] == "NodePort"
    assert "clusterIP" not in spec
    assert spec["internalTrafficPolicy"] == "Local"
    assert spec["ports"] == [{"name": "metrics", "port": 9500, "targetPort": "metrics",
                              "protocol": "TCP", "nodePort": 30433}]


def test_headless_service_needs_cluster_ip_type() -> None:
    with pytest.raises(helm().HelmRenderError, match=r"service\.headless needs"):
        manifests({"service": {"type": "LoadBalancer"}})
    spec = one(manifests({"service": {"type": "LoadBalancer", "headless": False}}),
               "Service")["spec"]
    assert spec["type"] == "LoadBalancer"


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"service": {"type": "External"}}, "/service/type"),
        ({"service": {"port": 0}}, "/service/port"),
        ({"service": {"internalTrafficPolicy": "local"}}, "/service/internalTrafficPolicy"),
        ({"namespaceOverride": "GPU_Telemetry"}, "/namespaceOverride"),
        ({"commonLabels": {"app.kubernetes.io/name": "x"}},
         "propertyName 'app.kubernetes.io/name'"),
        ({"serviceMonitor": {"exporterPodLabels": "hide"}}, "/serviceMonitor/exporterPodLabels"),
        ({"serviceMonitor": {"relabelings": [{"source_labels": ["a"]}]}},
         "/serviceMonitor/relabelings/0"),
        ({"podMonitor": {"metricRelabelings": [{"action": "delete"}]}},
         "/podMonitor/metricRelabelings/0/action"),
    ],
)
def test_values_schema_checks_the_new_options(values: dict[str, Any], names: str) -> None:
    with pytest.raises(helm().HelmValuesError, match=names):
        manifests(values)


def _endpoint(obj: dict[str, Any]) -> dict[str, Any]:
    key = "endpoints" if obj["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
    ep: dict[str, Any] = obj["spec"][key][0]
    return ep


def _monitors(values: dict[str, Any]) -> list[dict[str, Any]]:
    objs = manifests({"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True},
                      **values})
    return by_kind(objs, "ServiceMonitor") + by_kind(objs, "PodMonitor")


def test_monitors_drop_the_exporter_pod_labels_by_default() -> None:
    for monitor in _monitors({}):
        assert _endpoint(monitor)["relabelings"] == [
            {"action": "labeldrop", "regex": "namespace|pod|container"}]


def test_user_relabelings_come_after_the_charts() -> None:
    (sm,) = [m for m in manifests(OPTIONS) if m["kind"] == "ServiceMonitor"]
    ep = _endpoint(sm)
    assert ep["relabelings"][0]["action"] == "labeldrop"
    assert ep["relabelings"][1:] == OPTIONS["serviceMonitor"]["relabelings"]
    assert ep["metricRelabelings"] == OPTIONS["serviceMonitor"]["metricRelabelings"]
    (pm,) = [m for m in manifests(OPTIONS) if m["kind"] == "PodMonitor"]
    assert _endpoint(pm)["metricRelabelings"] == OPTIONS["podMonitor"]["metricRelabelings"]


def test_keep_leaves_the_operator_behaviour() -> None:
    keep = {"exporterPodLabels": "keep"}
    for monitor in _monitors({"serviceMonitor": {"enabled": True, **keep},
                              "podMonitor": {"enabled": True, **keep}}):
        assert "relabelings" not in _endpoint(monitor)


# --- the relabelings in a real Prometheus -----------------------------------------------

EXPOSITION = b"""\
# TYPE goodput_gpu_busy_unproductive gauge
goodput_gpu_busy_unproductive{node="n1",gpu="0",reason="hollow_busy"} 1
# TYPE goodput_gpu_pod_info gauge
goodput_gpu_pod_info{node="n1",gpu="0",namespace="inference",pod="llama-0",container="main"} 1
"""


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(EXPOSITION)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def exporter_stub() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _as_prometheus(relabel: dict[str, Any]) -> dict[str, Any]:
    """A prometheus-operator RelabelConfig as the operator writes it into prometheus.yml."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {names.get(k, k): (v.lower() if k == "action" else v) for k, v in relabel.items()}


def _scrape(workdir: Path, target: str, mode: str) -> dict[str, dict[str, str]]:
    """Scrape ``target`` the way the operator configures a PodMonitor of the chart with
    exporterPodLabels=``mode``: the exporter pod's target labels first, then the chart's
    relabelings, honor_labels on. Returns metric name -> the stored series' labels."""
    (monitor,) = [m for m in _monitors({"podMonitor": {"enabled": True,
                                                       "exporterPodLabels": mode}})
                  if m["kind"] == "PodMonitor"]
    ep = _endpoint(monitor)
    relabel = [_as_prometheus(r) for r in ep.get("relabelings", [])]
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{
            "job_name": "gpu-goodput-exporter",
            "honor_labels": ep["honorLabels"],
            "static_configs": [{"targets": [target], "labels": {
                "namespace": "monitoring", "pod": "gge-gpu-goodput-exporter-x7k2p",
                "container": "exporter"}}],
            "relabel_configs": relabel,
        }],
    }
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen(
        [require("prometheus"), f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            q = urllib.parse.urlencode({"query": '{__name__=~"goodput_.*"}'})
            with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as resp:
                result = json.load(resp)["data"]["result"]
            if len(result) == 2:
                return {r["metric"].pop("__name__"): r["metric"] for r in result}
            time.sleep(0.5)
        raise AssertionError("Prometheus never stored the two series")
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.integration
def test_an_unattributed_series_carries_no_exporter_pod(exporter_stub: str,
                                                        tmp_path: Path) -> None:
    """Default (drop): the unattributed series names no pod at all, the attributed one keeps
    the workload the exporter named; keep reproduces the defect the default removes."""
    stored = _scrape(tmp_path / "drop", exporter_stub, "drop")
    assert EXPORTER_POD_LABELS.isdisjoint(stored["goodput_gpu_busy_unproductive"])
    info = stored["goodput_gpu_pod_info"]
    assert (info["namespace"], info["pod"], info["container"]) == ("inference", "llama-0", "main")

    renamed = _scrape(tmp_path / "rename", exporter_stub, "rename")
    busy = renamed["goodput_gpu_busy_unproductive"]
    assert EXPORTER_POD_LABELS.isdisjoint(busy)
    assert busy["exporter_pod"] == "gge-gpu-goodput-exporter-x7k2p"
    assert renamed["goodput_gpu_pod_info"]["pod"] == "llama-0"

    kept = _scrape(tmp_path / "keep", exporter_stub, "keep")
    assert kept["goodput_gpu_busy_unproductive"]["pod"] == "gge-gpu-goodput-exporter-x7k2p"
