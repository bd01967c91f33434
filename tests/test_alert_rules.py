"""The rule files: promtool accepts and tests them, and every alert is complete.

Complete means: a severity, a summary, a description, a runbook_url pointing at an existing
docs/runbooks/<AlertName>.md, and promtool unit tests with a firing case and a near miss.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from mixin.config import load
from tests.support.prometheus import require

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "alerts"
RULE_FILES = sorted(ALERTS.glob("*.rules.yml"))  # the Helm chart ships exactly these
TEST_FILES = sorted((ALERTS / "tests").glob("*.test.yml"))

REQUIRED_ALERTS = {
    "GPUBusyButUnproductive", "GPUBusyNoOutput", "GPUAllocatedIdle", "GPUHostBound",
    "GPULowGoodputVsFleet", "GPUProfilingUnavailable", "GPUProfilingStale",
    "GoodputExporterDown", "GoodputExporterStale", "GoodputExporterSourceErrors",
    "ServingTargetDown", "GPUXidCritical", "GPUThermalThrottling", "GPUPowerBrake",
    "GPUEccUncorrectable", "GPURowRemapFailure", "GPURowRemapPending", "GPULost",
}


def alert_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            rules.extend(r for r in group["rules"] if "alert" in r)
    return rules


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_promtool_check_rules_lint_clean() -> None:
    result = run(require("promtool"), "check", "rules", "--lint=all", "--lint-fatal",
                 *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass() -> None:
    result = run(require("promtool"), "test", "rules", *map(str, TEST_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_required_alerts_exist() -> None:
    assert {r["alert"] for r in alert_rules()} >= REQUIRED_ALERTS


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_is_complete(rule: dict[str, Any]) -> None:
    name = rule["alert"]
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    notes = rule["annotations"]
    assert notes["summary"].strip() and notes["description"].strip()
    url = notes["runbook_url"]
    assert url == f"{load().runbook_base_url}{name}.md"
    assert (ROOT / "docs" / "runbooks" / f"{name}.md").is_file(), f"no runbook for {name}"


def test_every_alert_has_firing_case_and_near_miss() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in TEST_FILES:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r["alert"] for r in alert_rules()}
    assert names - firing == set(), "alerts without a firing test"
    assert names - quiet == set(), "alerts without a near-miss test"
