"""The rule files: promtool accepts and tests them, and every alert is complete.

Complete means: a severity, a summary, a description, a runbook_url pointing at an existing
exporter/runbooks/<AlertName>.md (which the daemon serves: tests/test_runbooks.py), and
promtool unit tests with a firing case and a near miss.
"""

from __future__ import annotations

import json
import re
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
    assert (ROOT / "exporter" / "runbooks" / f"{name}.md").is_file(), f"no runbook for {name}"


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


# --- The rule set's structure (issue 23): lean, ordered, rollover-proof. -------------------

RECORDED = re.compile(r"goodput:[a-z0-9_]+(?::[a-z0-9_]+)?")
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
ROLLOVER = ALERTS / "tests" / "rollover.test.yml"


def ordered_rules() -> list[tuple[str, dict[str, Any]]]:
    """(group name, rule) in evaluation order: the recording file's groups, then the alerts'."""
    out = []
    for path in sorted(RULE_FILES, key=lambda p: "alerts" in p.name):
        for group in yaml.safe_load(path.read_text())["groups"]:
            out.extend((group["name"], rule) for rule in group["rules"])
    return out


def recording() -> dict[str, str]:
    return {r["record"]: r["expr"] for _, r in ordered_rules() if "record" in r}


def promtool_exprs(path: Path | None = None) -> str:
    """Every promql_expr_test expression of the unit tests (of one file), joined."""
    exprs = []
    for test_file in [path] if path else TEST_FILES:
        for case in yaml.safe_load(test_file.read_text())["tests"]:
            exprs.extend(check["expr"] for check in case.get("promql_expr_test", []))
    return "\n".join(exprs)


def panel_queries() -> str:
    """Every query the dashboards run (panel targets, variables), joined: a rule named only
    in a panel's description is not read."""
    exprs = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in board.get("panels", []):
            for p in (panel, *panel.get("panels", [])):
                exprs.extend(t["expr"] for t in p.get("targets", []))
        exprs.extend(str(v.get("query")) for v in board["templating"]["list"])
    return "\n".join(exprs)


def test_every_recording_rule_has_a_consumer() -> None:
    """Strict: no exceptions list. A rule nobody reads is deleted, not kept "for later"."""
    rules = ordered_rules()
    panels = panel_queries()
    unused = []
    for name in recording():
        readers = [r for _, r in rules if r.get("record") != name
                   and name in RECORDED.findall(r["expr"])]
        if not readers and name not in RECORDED.findall(panels):
            unused.append(name)
    assert sorted(unused) == [], "no alert, rule or panel reads these"


def test_every_recording_rule_has_a_promtool_test() -> None:
    tested = set(RECORDED.findall(promtool_exprs()))
    assert sorted(set(recording()) - tested) == []


def test_rule_inputs_are_evaluated_before_the_rule() -> None:
    """A rule reads recorded series of its own group (earlier in it) or of an earlier group:
    a reference forward, or back into a later group, lags a whole evaluation interval."""
    groups: list[str] = []
    done: dict[str, str] = {}  # recorded name -> group
    late = []
    for group, rule in ordered_rules():
        if not groups or groups[-1] != group:
            groups.append(group)
        for name in set(RECORDED.findall(rule["expr"])) - {rule.get("record")}:
            if name not in done:
                late.append(f"{rule.get('record') or rule['alert']} reads {name}")
        if "record" in rule:
            done[rule["record"]] = group
    assert late == []


def test_unit_tests_run_the_groups_in_evaluation_order() -> None:
    """promtool runs a test file's groups in random order unless `group_eval_order` names
    them: a rule then reads its input from the previous evaluation one run in ten (CI caught
    rollover.test.yml doing that). Every file names every group it loads, in file order."""
    for path in TEST_FILES:
        test = yaml.safe_load(path.read_text())
        loaded = [group["name"] for source in test["rule_files"]
                  for group in yaml.safe_load((path.parent / source).read_text())["groups"]]
        assert test.get("group_eval_order") == loaded, path.name


def test_groups_hold_at_most_twenty_rules() -> None:
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            assert len(group["rules"]) <= 20, group["name"]


def test_no_rule_keeps_labels_by_exclusion() -> None:
    """`without` keeps every label nobody named, the scrape target's instance and pod among
    them: a replaced exporter pod would split a GPU in two. Rules aggregate `by`."""
    for _, rule in ordered_rules():
        assert "without" not in rule["expr"], rule.get("record") or rule["alert"]


def test_pod_replacement_covers_every_alert_and_joining_rule() -> None:
    """rollover.test.yml replaces node n1's exporter pod: every alert is evaluated across the
    replacement (each fires but GoodputExporterDown, which must stay quiet), and so is every
    recording rule that joins series."""
    firing: set[str] = set()
    evaluated: set[str] = set()
    for case in yaml.safe_load(ROLLOVER.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            evaluated.add(check["alertname"])
            if check["exp_alerts"]:
                firing.add(check["alertname"])
    names = {r["alert"] for r in alert_rules()}
    assert names - evaluated == set()
    assert names - firing == {"GoodputExporterDown"}
    joining = {name for name, expr in recording().items()
               if re.search(r"\bon \(|group_(left|right)", expr)}
    assert len(joining) >= 10
    assert sorted(joining - set(RECORDED.findall(promtool_exprs(ROLLOVER)))) == []


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_thresholds_sit_in_the_alert_expression(rule: dict[str, Any]) -> None:
    """The number an alert fires at is read in its own expression, not hidden in a
    recording rule, so the rule file alone says when it fires."""
    expr = rule["expr"]
    for name, value in load().alerts[rule["alert"]].thresholds.items():
        assert re.search(rf"(?<![\w.]){re.escape(f'{value:g}')}(?![\w.])", expr), name
    assert re.search(r"(==|>=|<=|>|<) *[\d.]+", expr), "no comparison with a number"


LOOKUP = re.compile(r'printf\s+"([^"]*)"\s+((?:\(or \$labels\.\w+ ""\)\s*)+)\|\s*query')
LOOKUP_ARG = re.compile(r'\(or \$labels\.(\w+) ""\)')


def test_annotation_lookups_are_scoped_by_cluster() -> None:
    """Every `query` lookup in an annotation names the alert's own cluster: under a global
    ruler a lookup by node and GPU alone would quote another cluster's GPU or pods. Every
    label goes in as `(or $labels.x "")`: a label the alert lacks (cluster, a Slurm job's
    namespace) must format as "" on vmalert too, where a bare $labels.x formats as
    `%!q(<nil>)` and the broken query drops the whole alert (docs/install.md)."""
    lookups = 0
    for rule in alert_rules():
        for text in rule["annotations"].values():
            assert text.count("| query") == len(LOOKUP.findall(text)), rule["alert"]
            for selector, args in LOOKUP.findall(text):
                lookups += 1
                assert "cluster=%q" in selector, (rule["alert"], selector)
                names = re.findall(r"\w+(?==%q)", selector)
                assert LOOKUP_ARG.findall(args) == names, (rule["alert"], args)
    assert lookups >= 11
