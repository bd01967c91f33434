"""The chart's values contract and its link to the rest of the repository: the values
schema rejects typos, the rendered daemon config passes the daemon's own schema, and the
PrometheusRules and dashboards are the repository's alerts/ and dashboards/ files."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import __version__, cli, collectors
from exporter.sources.kubernetes.config import KubernetesConfig
from exporter.sources.profiling.config import ProfilingConfig
from exporter.sources.serving.config import ServingConfig
from exporter.wiring import config as daemon_config
from tests.support.helm import (
    CHART,
    ROOT,
    VALUE_SETS,
    by_kind,
    exporter_container,
    helm,
    manifests,
    one,
    render,
)

RULES = """\
groups:
  - name: gpu-goodput.{name}
    rules:
      - alert: GPUHollowBusy{name}
        expr: max by (node, gpu) (goodput_gpu_busy_unproductive) == 1
        for: 10m
        labels: {{severity: warning}}
        annotations:
          summary: "GPU {{{{ $labels.gpu }}}} on {{{{ $labels.node }}}} is busy doing nothing"
      - record: node:goodput_gpu_sm_active_ratio:avg
        expr: avg by (node) (goodput_gpu_sm_active_ratio)
"""


def test_chart_version_tracks_the_exporter() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["kubeVersion"]
    assert chart["appVersion"] == __version__


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"exporter": {"prot": 9433}}, "prot"),
        ({"exporter": {"port": "9433"}}, "/exporter/port"),
        ({"profiling": {"mode": "nvml"}}, "/profiling/mode"),
        ({"webConfig": {"basicAuthUsers": {"u": "plaintext"}}}, "/webConfig/basicAuthUsers/u"),
        ({"resources": {"limits": {"memory": None}}}, "memory"),
    ],
)
def test_values_schema_rejects_and_names_the_key(values: dict[str, Any], names: str) -> None:
    with pytest.raises(helm().HelmValuesError, match=names):
        render(values)


def test_values_yaml_documents_every_key_the_schema_knows() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(schema["properties"]) - {"global"} == set(values)


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_daemon_config_passes_the_daemon_schema(name: str, tmp_path: Path) -> None:
    """The container args, the config file and the GOODPUT_* environment the DaemonSet
    sets, as the daemon reads them: args through the daemon's own argparse parser, then the
    three layers through config.build (the kubelet's $(HOST_IP) expansion done by hand).
    No key is skipped: a key the chart writes that the daemon does not know fails here."""
    values = VALUE_SETS[name]
    objs = manifests(values)
    cm = next(o for o in by_kind(objs, "ConfigMap") if "config.yaml" in o["data"])
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    container = exporter_container(objs)
    env = {e["name"]: e["value"].replace("$(HOST_IP)", "10.0.0.7")
           for e in container["env"] if e["name"].startswith("GOODPUT_")}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    args = [
        f"--config={path}" if a.startswith("--config=") else a for a in container["args"]
    ]
    ns = cli.parser().parse_args(args)
    settings = daemon_config.build(cli.flags_to_tree(ns), environ=env, config_file=ns.config)
    assert settings.listen == ":9433"
    discovery = values.get("serving", {}).get("discovery", {}).get("enabled", False)
    assert settings.section(ServingConfig).discover_pods is discovery
    pod_labels = values.get("kubernetes", {}).get("podLabels", {}).get("enabled", False)
    assert settings.section(KubernetesConfig).pod_labels is pod_labels
    attribution = values.get("kubernetes", {}).get("attribution", {}).get("enabled", False)
    assert settings.section(KubernetesConfig).enabled is attribution
    assert settings.section(ProfilingConfig).mode == values.get("profiling", {}).get("mode", "auto")
    exporter_values = values.get("exporter", {})
    assert settings.collectors == exporter_values.get("collectors", {})
    assert settings.extended_metrics is exporter_values.get("extendedMetrics", False)
    assert settings.debug_state is exporter_values.get("debugState", False)


def test_chart_names_every_collector_of_the_registry() -> None:
    """The chart's `exporter.collectors` schema lists exactly the daemon's collectors."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    names = schema["properties"]["exporter"]["properties"]["collectors"]["properties"]
    assert set(names) == set(collectors.NAMES)


def test_config_values_merge_over_the_derived_keys() -> None:
    objs = manifests({"config": {"serving": {"timeout": 3.5}, "interval": 2}})
    cfg = yaml.safe_load(one(objs, "ConfigMap")["data"]["config.yaml"])
    assert cfg["serving"] == {"targets": [], "timeout": 3.5}
    assert cfg["interval"] == 2


def test_monitors_honor_labels() -> None:
    objs = manifests(VALUE_SETS["monitoring"])
    assert one(objs, "ServiceMonitor")["spec"]["endpoints"][0]["honorLabels"] is True
    assert one(objs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True
    assert one(objs, "ServiceMonitor")["metadata"]["labels"]["release"] == "kps"


# --- alerts/ and dashboards/ reach the chart through symlinks --------------------------


def test_chart_files_are_relative_symlinks_to_the_repository_dirs() -> None:
    for name in ("alerts", "dashboards"):
        link = CHART / "files" / name
        assert link.is_symlink(), f"{link} must be a symlink, not a copy"
        assert not os.path.isabs(os.readlink(link))
        assert link.resolve() == (ROOT / name).resolve()


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A scratch repository: the chart (symlinks kept) next to its own alerts/ and dashboards/."""
    (tmp_path / "helm").mkdir()
    shutil.copytree(CHART, tmp_path / "helm" / CHART.name, symlinks=True)
    alerts = tmp_path / "alerts"
    alerts.mkdir()
    (alerts / "goodput.rules.yml").write_text(RULES.format(name="a"))
    (alerts / "fleet_health.rules.yml").write_text(RULES.format(name="b"))
    (alerts / "goodput_test.yml").write_text("rule_files: [goodput.rules.yml]\ntests: []\n")
    dashboards = tmp_path / "dashboards"
    dashboards.mkdir()
    (dashboards / "gpu-goodput.json").write_text(json.dumps(
        {"title": "GPU goodput", "uid": "gpu-goodput", "panels": [
            {"type": "timeseries", "targets": [
                {"expr": 'sum by (gpu) (goodput_gpu_sm_active_ratio{node="$node"})'}]}]},
        indent=2))
    return tmp_path


def test_rules_and_dashboards_come_from_the_repository_files(repo_copy: Path) -> None:
    chart = repo_copy / "helm" / CHART.name
    objs = manifests(VALUE_SETS["monitoring"], chart=chart)
    rules = {o["metadata"]["annotations"]["gpu-goodput-exporter/source"]: o
             for o in by_kind(objs, "PrometheusRule")}
    assert set(rules) == {"alerts/goodput.rules.yml", "alerts/fleet_health.rules.yml"}
    for source, obj in rules.items():
        expected = yaml.safe_load((repo_copy / source).read_text())["groups"]
        assert obj["spec"]["groups"] == expected
        assert obj["metadata"]["labels"]["release"] == "kps"
    assert rules["alerts/fleet_health.rules.yml"]["metadata"]["name"].endswith("fleet-health")
    dash = [o for o in by_kind(objs, "ConfigMap") if "grafana_dashboard" in o["metadata"]["labels"]]
    assert len(dash) == 1
    assert dash[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dash[0]["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    assert dash[0]["data"]["gpu-goodput.json"] == (
        repo_copy / "dashboards" / "gpu-goodput.json").read_text()


def test_a_broken_rule_file_fails_the_render_naming_it(repo_copy: Path) -> None:
    (repo_copy / "alerts" / "broken.rules.yml").write_text("rules: []\n")
    with pytest.raises(helm().HelmRenderError, match=r"broken\.rules\.yml"):
        render(VALUE_SETS["monitoring"], chart=repo_copy / "helm" / CHART.name)


def test_packaged_chart_carries_identical_copies(repo_copy: Path, tmp_path: Path) -> None:
    """`helm package` dereferences the symlinks: a released chart needs no repository."""
    out = tmp_path / "dist"
    out.mkdir()
    archive = helm().package(str(repo_copy / "helm" / CHART.name), destination=str(out))
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for src in ("alerts/goodput.rules.yml", "dashboards/gpu-goodput.json"):
            member = members[f"{CHART.name}/files/{src}"]
            assert member.isfile()
            data = tar.extractfile(member)
            assert data is not None
            assert data.read() == (repo_copy / src).read_bytes()
        # Rule unit tests stay out of the chart (.helmignore).
        assert f"{CHART.name}/files/alerts/goodput_test.yml" not in members
        # `helm show readme` has something to show
        readme = tar.extractfile(members[f"{CHART.name}/README.md"])
        assert readme is not None and b"image.repository" in readme.read()


def test_the_real_repository_files_render() -> None:
    """Whatever alerts/ and dashboards/ hold now renders into objects, one per file."""
    objs = manifests(VALUE_SETS["monitoring"])
    rule_files = sorted((ROOT / "alerts").glob("*.rules.yml"))
    sources = sorted(o["metadata"]["annotations"]["gpu-goodput-exporter/source"]
                     for o in by_kind(objs, "PrometheusRule"))
    assert sources == [f"alerts/{p.name}" for p in rule_files]
    dash_files = sorted((ROOT / "dashboards").glob("*.json"))
    dashboards = [o for o in by_kind(objs, "ConfigMap")
                  if "grafana_dashboard" in o["metadata"]["labels"]]
    assert len(dashboards) == len(dash_files)
    for cm in dashboards:
        ((key, text),) = cm["data"].items()
        assert text == (ROOT / "dashboards" / key).read_text()


def test_runbook_base_url_value_rewrites_every_runbook_link() -> None:
    values = {"prometheusRule": {"enabled": True,
                                 "runbookBaseUrl": "https://wiki.example/runbooks/"}}
    alerts = [rule for obj in by_kind(manifests(values), "PrometheusRule")
              for group in obj["spec"]["groups"] for rule in group["rules"] if "alert" in rule]
    assert len(alerts) >= 18
    for rule in alerts:
        assert (rule["annotations"]["runbook_url"]
                == f"https://wiki.example/runbooks/{rule['alert']}.md")



def runbook_urls(values: dict[str, Any]) -> dict[str, str]:
    """Alert -> runbook_url of the rendered PrometheusRules."""
    objs = manifests({**values, "prometheusRule": {"enabled": True}})
    return {rule["alert"]: rule["annotations"]["runbook_url"]
            for obj in by_kind(objs, "PrometheusRule") for group in obj["spec"]["groups"]
            for rule in group["rules"] if "alert" in rule}


@pytest.mark.parametrize(("values", "base"), [
    # Headless (the default): the name resolves to the pods, so the pods' port.
    ({}, "http://gge-gpu-goodput-exporter.monitoring.svc:9433/runbooks/"),
    ({"exporter": {"port": 9555}, "service": {"port": 9500}},
     "http://gge-gpu-goodput-exporter.monitoring.svc:9555/runbooks/"),
    # A virtual IP: the Service's port; namespaceOverride; TLS on the exporter.
    ({"namespaceOverride": "gpu-telemetry", "fullnameOverride": "gge",
      "service": {"headless": False, "port": 9500},
      "webConfig": {"enabled": True, "tls": {"enabled": True, "secretName": "t"}}},
     "https://gge.gpu-telemetry.svc:9500/runbooks/"),
    # No Service: the URL the rule files were generated with.
    ({"service": {"enabled": False}}, "http://localhost:9433/runbooks/"),
])
def test_runbook_links_default_to_the_charts_own_service(values: dict[str, Any],
                                                         base: str) -> None:
    """Out of the box every alert links to a page the exporters serve (tests/
    test_runbooks.py fetches each one from a real daemon)."""
    urls = runbook_urls(values)
    assert len(urls) >= 18
    assert urls == {alert: f"{base}{alert}.md" for alert in urls}
