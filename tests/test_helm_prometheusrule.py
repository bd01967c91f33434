"""The chart's PrometheusRule and dashboards select the job the chart's own monitors scrape as.

The rule files and dashboards select `job="gpu-goodput-exporter"` (mixin/config.yaml); the
ServiceMonitor and PodMonitor name the job after app.kubernetes.io/name, which follows
nameOverride. A rename must not leave the shipped rules or panels matching nothing.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import promql_parser
import yaml

from mixin.config import load
from tests.support.helm import by_kind, manifests
from tests.support.prometheus import require
from tests.test_dashboards import substitute, targets

ROOT = Path(__file__).resolve().parent.parent
MIXIN_JOB = 'job="gpu-goodput-exporter"'
JOB = re.compile(r'\bjob="([^"]*)"')


def rule_objects(values: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """alerts/<file> -> the rendered PrometheusRule's groups."""
    objs = manifests({"prometheusRule": {"enabled": True}, **values})
    return {o["metadata"]["annotations"]["gpu-goodput-exporter/source"]: o["spec"]["groups"]
            for o in by_kind(objs, "PrometheusRule")}


def exprs(groups: list[dict[str, Any]]) -> list[str]:
    return [rule["expr"] for group in groups for rule in group["rules"]]


def test_the_template_replaces_the_mixins_default_job() -> None:
    assert MIXIN_JOB in load().selector
    template = (ROOT / "helm" / "gpu-goodput-exporter" / "templates" / "prometheusrule.yaml")
    assert 'printf "job=%q" "gpu-goodput-exporter"' in template.read_text()


def test_default_render_is_the_rule_files_unchanged() -> None:
    """Unchanged but for the runbook links, which point at the chart's own Service
    (tests/test_helm_chart.py checks them)."""
    mixin_base = load().runbook_base_url
    service_base = "http://gge-gpu-goodput-exporter.monitoring.svc:9433/runbooks/"
    for source, groups in rule_objects({}).items():
        for group in groups:
            for rule in group["rules"]:
                if "alert" in rule:
                    url = rule["annotations"]["runbook_url"]
                    assert url.startswith(service_base)
                    rule["annotations"]["runbook_url"] = url.replace(service_base, mixin_base)
        assert groups == yaml.safe_load((ROOT / source).read_text())["groups"]


def test_name_override_renames_the_job_in_every_rule_and_monitor(tmp_path: Path) -> None:
    values = {"nameOverride": "gpu-goodput", "serviceMonitor": {"enabled": True},
              "podMonitor": {"enabled": True}}
    objs = manifests({"prometheusRule": {"enabled": True}, **values})
    for kind in ("ServiceMonitor", "PodMonitor"):
        (monitor,) = by_kind(objs, kind)
        assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    (service,) = by_kind(objs, "Service")
    assert service["metadata"]["labels"]["app.kubernetes.io/name"] == "gpu-goodput"
    pod = by_kind(objs, "DaemonSet")[0]["spec"]["template"]["metadata"]["labels"]
    assert pod["app.kubernetes.io/name"] == "gpu-goodput"

    rendered = rule_objects(values)
    matched = 0
    for source, groups in rendered.items():
        original = exprs(yaml.safe_load((ROOT / source).read_text())["groups"])
        for before, after in zip(original, exprs(groups), strict=True):
            assert set(JOB.findall(after)) <= {"gpu-goodput"}, after
            assert after == before.replace(MIXIN_JOB, 'job="gpu-goodput"')
            matched += bool(JOB.search(after))
        (tmp_path / Path(source).name).write_text(yaml.safe_dump({"groups": groups}))
    assert matched > 40

    # The rendered rules pass promtool and the pod-replacement unit tests under the new job.
    files = sorted(map(str, tmp_path.glob("*.rules.yml")))
    lint = subprocess.run([require("promtool"), "check", "rules", "--lint=all", "--lint-fatal",
                           *files], capture_output=True, text=True, timeout=60, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    tests = tmp_path / "tests"
    tests.mkdir()
    rollover = (ROOT / "alerts" / "tests" / "rollover.test.yml").read_text()
    # The runbook links follow the rename too: the Service is gge-gpu-goodput.
    rollover = rollover.replace(load().runbook_base_url,
                                "http://gge-gpu-goodput.monitoring.svc:9433/runbooks/")
    (tests / "rollover.test.yml").write_text(rollover.replace("gpu-goodput-exporter",
                                                              "gpu-goodput"))
    result = subprocess.run([require("promtool"), "test", "rules", "rollover.test.yml"],
                            cwd=tests, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def board_queries(board: dict[str, Any]) -> list[str]:
    """Every PromQL a dashboard sends: panel targets and query variables."""
    out = [expr for _, expr in targets(board)]
    out += [v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return out


def test_name_override_renames_the_job_in_every_dashboard_query() -> None:
    """The chart's dashboards ConfigMaps select the chart's job, like its PrometheusRule."""
    objs = manifests({"nameOverride": "gpu-goodput", "dashboards": {"enabled": True}})
    maps = by_kind(objs, "ConfigMap")
    boards = {name: json.loads(text) for cm in maps for name, text in cm["data"].items()
              if name.endswith(".json")}
    assert sorted(boards) == sorted(p.name for p in (ROOT / "dashboards").glob("*.json"))
    matched = 0
    for name, board in boards.items():
        original = board_queries(json.loads((ROOT / "dashboards" / name).read_text()))
        for before, after in zip(original, board_queries(board), strict=True):
            assert MIXIN_JOB not in after, f"{name}: {after}"
            assert after == before.replace(MIXIN_JOB, 'job="gpu-goodput"')
            matched += 'job="gpu-goodput"' in after
            if not after.startswith("label_values("):
                promql_parser.parse(substitute(after))
    assert matched > 40
    # Default names: the files verbatim.
    for cm in by_kind(manifests({"dashboards": {"enabled": True}}), "ConfigMap"):
        for name, text in cm["data"].items():
            if name.endswith(".json"):
                assert text == (ROOT / "dashboards" / name).read_text()
