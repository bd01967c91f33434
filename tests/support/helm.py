"""Render the Helm chart with Helm's own Go engine (PyPI ``helm-python-sdk``) for tests.

There is no ``helm`` binary in CI; ``helm_python`` binds Helm's SDK through ctypes, so
lint, schema validation and template rendering are the real thing, not a re-implementation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "gpu-goodput-exporter"
SCHEMAS = ROOT / "tests" / "schemas"
RELEASE = "gge"
NAMESPACE = "monitoring"

# Kubernetes versions the manifests are validated against (chart's kubeVersion is >=1.25).
KUBE_VERSIONS = ("1.27", "1.30", "1.33")

BCRYPT_HASH = "$2b$10$" + "a" * 53  # shape of a bcrypt hash; never checked here

# Value sets CI renders: one per optional feature, plus everything on at once.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "discovery": {"serving": {"discovery": {"enabled": True}}},
    "dcgm": {"profiling": {"mode": "dcgm"}},
    "dcgm-hostengine": {"profiling": {"mode": "dcgm", "dcgm": {"embedded": False}}},
    "attribution": {"kubernetes": {"attribution": {"enabled": True, "deviceCheckpoint": True},
                                   "hostPID": True}},
    "pod-labels": {"kubernetes": {"attribution": {"enabled": True},
                                  "podLabels": {"enabled": True}}},
    "jobs": {"kubernetes": {"hostPID": True},
             "jobs": {"readEnviron": True, "hpcJobMappingDir": "/run/dcgm-job-map"}},
    "dcgm-exporter": {"profiling": {"mode": "dcgm-exporter",
                                    "dcgmExporterUrl": "http://$(HOST_IP):9400/metrics"}},
    "monitoring": {
        "serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kps"},
                           "metricRelabelings": [{"action": "drop", "regex": "go_.*",
                                                  "sourceLabels": ["__name__"]}]},
        "podMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True, "additionalLabels": {"release": "kps"}},
        "dashboards": {"enabled": True, "annotations": {"grafana_folder": "GPU"}},
    },
    "service-options": {
        "namespaceOverride": "gpu-telemetry",
        "commonLabels": {"team": "ml-platform", "cost-centre": "gpu"},
        "service": {"type": "NodePort", "headless": False, "port": 9500, "nodePort": 30433,
                    "internalTrafficPolicy": "Local", "annotations": {"a.example/x": "y"}},
        "serviceMonitor": {"enabled": True,
                           "relabelings": [{"action": "replace",
                                            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                                            "targetLabel": "instance"}],
                           "metricRelabelings": [{"action": "drop", "regex": "go_.*",
                                                  "sourceLabels": ["__name__"]}]},
        "podMonitor": {"enabled": True, "exporterPodLabels": "rename",
                       "metricRelabelings": [{"action": "labeldrop", "regex": "engine"}]},
        "prometheusRule": {"enabled": True},
        "dashboards": {"enabled": True},
        "networkPolicy": {"enabled": True},
        "kubernetes": {"attribution": {"enabled": True}, "podLabels": {"enabled": True}},
        "webConfig": {"enabled": True, "basicAuthUsers": {"prometheus": BCRYPT_HASH}},
    },
    "webconfig": {
        "webConfig": {
            "enabled": True,
            "tls": {"enabled": True, "secretName": "gge-tls",
                    "clientAuthType": "RequireAndVerifyClientCert", "minVersion": "TLS13"},
            "basicAuthUsers": {"prometheus": BCRYPT_HASH},
        },
        "serviceMonitor": {
            "enabled": True,
            "tlsConfig": {"ca": {"secret": {"name": "gge-tls", "key": "ca.crt"}},
                          "serverName": "gge"},
            "basicAuth": {"username": {"name": "scrape", "key": "user"},
                          "password": {"name": "scrape", "key": "pass"}},
        },
    },
    "networkpolicy": {
        "networkPolicy": {"enabled": True, "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]},
    },
    "everything": {
        "runtimeClassName": "nvidia",
        "priorityClassName": "system-node-critical",
        "image": {"digest": "sha256:" + "0" * 64},
        "exporter": {"extraArgs": ["--log-format=console"],
                     "extraVolumes": [{"name": "engine", "secret": {"secretName": "engine"}}],
                     "extraVolumeMounts": [{"name": "engine", "mountPath": "/secrets/engine",
                                            "readOnly": True}],
                     "collectors": {"xid": False, "serving": True},
                     "extendedMetrics": True, "debugState": True,
                     "extraEnv": [{"name": "GOODPUT_SERVING__TIMEOUT", "value": "3"}]},
        "serving": {"targets": [{"url": "http://127.0.0.1:8000/metrics", "engine": "vllm",
                                 "gpus": ["0"]},
                                {"url": "https://10.0.0.5:8000/metrics", "gpus": ["1"],
                                 "authorization": {"type": "Bearer",
                                                   "credentials_file": "/secrets/engine/token"},
                                 "tls_config": {"ca_file": "/secrets/engine/ca.crt"}}],
                    "discovery": {"enabled": True}},
        "kubernetes": {"attribution": {"enabled": True}, "hostPID": True},
        "profiling": {"mode": "dcgm"},
        "serviceMonitor": {"enabled": True},
        "podMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "dashboards": {"enabled": True},
        "networkPolicy": {"enabled": True},
        "webConfig": {"enabled": True, "tls": {"enabled": True, "secretName": "t"}},
    },
}


def helm() -> Any:
    """Import ``helm_python`` or skip: it is a dev-extra tool, 244 MB installed."""
    mod = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")
    mod.disable_logging()
    return mod


# No image is published, so the chart requires image.repository; every render names one.
IMAGE_REPOSITORY = "registry.example.com/gpu-goodput-exporter"


def with_image(values: dict[str, Any] | None) -> dict[str, Any]:
    """``values`` with image.repository set, unless the caller set it (even to "")."""
    out = dict(values or {})
    image = dict(out.get("image") or {})
    image.setdefault("repository", IMAGE_REPOSITORY)
    out["image"] = image
    return out


def render(values: dict[str, Any] | None = None, chart: Path = CHART) -> dict[str, str]:
    """Template path -> rendered text, exactly what `helm template` would print."""
    with helm().Chart.load(str(chart)) as loaded:
        out: dict[str, str] = loaded.render(with_image(values), name=RELEASE,
                                            namespace=NAMESPACE)
    return out


def manifests(values: dict[str, Any] | None = None, chart: Path = CHART) -> list[dict[str, Any]]:
    """Every Kubernetes object the chart renders (NOTES.txt and empty documents left out)."""
    objs: list[dict[str, Any]] = []
    for path, text in sorted(render(values, chart).items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objs.append(doc)
    return objs


def notes(values: dict[str, Any] | None = None) -> str:
    return next(t for p, t in render(values).items() if p.endswith("NOTES.txt"))


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def exporter_container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(objs, "DaemonSet")["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "exporter")


def crd_schema(kind: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SCHEMAS / f"{kind.lower()}-monitoring-v1.json").read_text())
    return data


def iter_value_sets() -> Iterator[tuple[str, dict[str, Any]]]:
    yield from VALUE_SETS.items()
