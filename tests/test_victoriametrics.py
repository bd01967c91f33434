"""The mixin unchanged on VictoriaMetrics (single node + vmalert, Debian's victoria-metrics) as on
Prometheus, side by side on the same fleet history (tests/side_by_side.py): every
alert fires alike with the same labels, with and without a `cluster` label; every recording
rule gives the same series, the key ones the same values within a stated tolerance; every
dashboard panel and variable query the same series.

When an alert fires: `for:` is reached without waiting for it. Each engine's live ruler
(Prometheus, vmalert) evaluates the shipped alert file on present data and lists what it
holds, pending or firing: a rule whose annotation template fails lists nothing on vmalert (the
alert is dropped). An alert fires on an engine when its ruler holds it and the engine's own
query of the alert's expression returned that label set at every rule evaluation (each
minute) across the alert's `for:` up to t0 - which is what `for:` means on both engines.

SIDE_BY_SIDE_RULES_DIR=<dir with goodput.rules.yml and goodput_alerts.rules.yml> runs it on
other rule files (the rules of an older release: `git show <rev>:alerts/<file>`).
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.fleet.generator import expected_alerts
from mixin import names as N
from tests.side_by_side import (
    ALERTS,
    CLUSTERS,
    DOWN,
    LATE,
    RULES,
    Engines,
    engines,
    xid_node,
)
from tests.test_dashboards import BOARDS, load, substitute, targets

pytestmark = pytest.mark.integration

Labels = frozenset[tuple[str, str]]
# What the generator's faults and the scenarios must fire, per engine, exactly (the others
# are held to firing alike).
CHECKED = ("GPULost", "GPUXidCritical", "GPUThermalThrottling", "GPUBusyButUnproductive",
           "GPUHostBound", "GPUJobStraggler", "GoodputExporterDown")
# Recorded values compared, and how close: the engines' rate() differ at a window's edge
# (Prometheus extrapolates from the first sample inside it, VictoriaMetrics reads from the
# last sample before it). Measured here: at most 0.0148 apart for ratios (hollow 0.060
# against 0.045), 3 % otherwise (utilization 0.361 against 0.350); the rules evaluate halfway
# between two samples every run (side_by_side.engines), so these are the same each run.
# Power and throttling are compared on their series only: the simulated energy and
# clock-event counters advance once every 75 s, so one engine may count one step more than
# the other in a 5 minute window (486 W against 731 W for a 584 W GPU; 1.11 against 1.00 for
# a GPU throttled all the time).
VALUES = (N.GPU_UTILIZATION, N.GPU_PROFILED, N.GPU_SM_ACTIVE, N.GPU_HOLLOW, N.GPU_TOKENS,
          N.GPU_XID, N.REGIME_GPUS, N.NAMESPACE_HOLLOW, N.NAMESPACE_TOKENS, N.MODEL_TOKENS,
          N.JOB_GPU_WAITING, N.JOB_STRAGGLER, N.JOB_WAITING_GPUS, N.JOB_WAITING)
ABS_TOLERANCE = 0.02  # ratios of time: 2 points
REL_TOLERANCE = 0.05  # everything else: 5 %


def _files() -> tuple[Path, Path]:
    other = os.environ.get("SIDE_BY_SIDE_RULES_DIR")
    if other:
        return Path(other) / RULES.name, Path(other) / ALERTS.name
    return RULES, ALERTS


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engines]:
    rules, alerts = _files()
    with engines(tmp_path_factory.mktemp("side-by-side"), rules, alerts) as e:
        yield e


def _alert_rules(path: Path) -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]
            if "alert" in r]


def _seconds(duration: str) -> int:
    match = re.fullmatch(r"(\d+)([smh])", duration)
    assert match, duration
    return int(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2]]


def _labels(metric: dict[str, str], rule: dict[str, Any]) -> Labels:
    out = {k: v for k, v in metric.items() if k != "__name__"}
    out.update(rule.get("labels", {}))
    out["alertname"] = rule["alert"]
    return frozenset(out.items())


Query = Callable[[str, float], list[dict[str, Any]]]


def _queries(e: Engines) -> dict[str, Query]:
    return {"Prometheus": lambda expr, at: e.prometheus.query(expr, at=at),
            "VictoriaMetrics": e.victoria.query}


def _held(query: Query, rule: dict[str, Any], t0: float) -> set[Labels]:
    """Label sets the expression returned at every evaluation over the rule's `for:`."""
    held: set[Labels] | None = None
    for k in range(_seconds(rule.get("for", "0s")) // 60 + 1):
        got = {_labels(s["metric"], rule) for s in query(rule["expr"], t0 - 60 * k)}
        held = got if held is None else held & got
    return held or set()


def _listed(alerts: list[dict[str, Any]]) -> dict[str, set[Labels]]:
    """alertname -> label sets the ruler holds (vmalert's own `alertgroup` label dropped)."""
    out: dict[str, set[Labels]] = defaultdict(set)
    for a in alerts:
        labels = {k: v for k, v in a["labels"].items() if k != "alertgroup"}
        out[labels["alertname"]].add(frozenset(labels.items()))
    return out


@pytest.fixture(scope="module")
def fired(both: Engines) -> dict[str, dict[str, set[Labels]]]:
    """engine -> alertname -> the label sets that fire at t0."""
    rulers = {"Prometheus": _listed(both.prometheus.api("alerts")["alerts"]),
              "VictoriaMetrics": _listed(both.vmalert.alerts())}
    out: dict[str, dict[str, set[Labels]]] = {}
    for engine, query in _queries(both).items():
        out[engine] = {r["alert"]: _held(query, r, both.feed.t0) & rulers[engine][r["alert"]]
                       for r in _alert_rules(both.alerts)}
    return out


def _show(labels: set[Labels]) -> str:
    drop = ("job", "alertname", "severity", "uuid")
    shown = sorted("{" + ",".join(f"{k}={v}" for k, v in sorted(ls) if k not in drop) + "}"
                   for ls in labels)
    return ", ".join(shown[:6]) + (f" and {len(shown) - 6} more" if len(shown) > 6 else "")


def test_every_alert_fires_alike(both: Engines,
                                 fired: dict[str, dict[str, set[Labels]]]) -> None:
    """Every alert that fires on Prometheus fires on vmalert with the same labels, and none
    fires on one engine only; the failure names the alerts and vmalert's error for each."""
    errors = {r["name"]: r.get("lastError", "") for r in both.vmalert.rules()}
    prom, vm = fired["Prometheus"], fired["VictoriaMetrics"]
    diffs = []
    for alert in prom:
        if prom[alert] != vm[alert]:
            why = f" (vmalert: {errors[alert][:300]})" if errors.get(alert) else ""
            diffs.append(f"{alert}: Prometheus only [{_show(prom[alert] - vm[alert])}], "
                         f"VictoriaMetrics only [{_show(vm[alert] - prom[alert])}]{why}")
    assert not diffs, "alerts that differ:\n" + "\n".join(diffs)


def test_no_rule_fails_on_either_ruler(both: Engines) -> None:
    bad = [f"vmalert {r['name']}: {r['lastError'][:300]}" for r in both.vmalert.rules()
           if r.get("lastError")]
    bad += [f"Prometheus {r['name']}: {r.get('lastError')}"
            for g in both.prometheus.api("rules")["groups"] for r in g["rules"]
            if r.get("health") != "ok"]
    assert not bad, "\n".join(bad)


def _expected(e: Engines) -> dict[str, set[tuple[str, str, str]]]:
    """alert -> (cluster, node, gpu) it must fire for, in both halves of the fleet."""
    per_gpu = {a: gpus for a, gpus in expected_alerts(e.plan).items() if a in CHECKED}
    node, gpu = xid_node(e.plan)
    per_gpu["GPUXidCritical"] = {(node, gpu)}
    out: dict[str, set[tuple[str, str, str]]] = {
        a: {(c, n, g) for c in CLUSTERS for n, g in gpus} for a, gpus in per_gpu.items()}
    out["GoodputExporterDown"] = {(c, DOWN, "") for c in CLUSTERS}
    return out


@pytest.mark.parametrize("engine", ["Prometheus", "VictoriaMetrics"])
def test_the_fleet_faults_fire(both: Engines, fired: dict[str, dict[str, set[Labels]]],
                               engine: str) -> None:
    """Lost GPU, XID, thermal, busy-unproductive, host-bound, straggler (Kubernetes and Slurm
    jobs) and exporter down each fire for exactly their GPUs or node, with and without a
    cluster label; the XID counted before the late node's exporter started pages nowhere."""
    want = _expected(both)
    assert {j[0] for j in both.plan.straggler_jobs} == {"kubernetes", "slurm"}
    for alert in CHECKED:
        got = {(dict(ls).get("cluster", ""), dict(ls).get("node", ""), dict(ls).get("gpu", ""))
               for ls in fired[engine][alert]}
        assert got == want[alert], alert
    assert not any(dict(ls).get("node") == LATE for ls in fired[engine]["GPUXidCritical"])


def _series(query: Query, expr: str, at: float) -> dict[Labels, float]:
    return {frozenset((k, v) for k, v in s["metric"].items() if k != "__name__"):
            float(s["value"][1]) for s in query(expr, at)}


def _records(path: Path) -> list[str]:
    return [r["record"] for g in yaml.safe_load(path.read_text())["groups"]
            for r in g["rules"] if "record" in r]


def test_every_recording_rule_gives_the_same_series(both: Engines) -> None:
    q = _queries(both)
    diffs, empty = [], set()
    for record in _records(both.rules):
        prom = set(_series(q["Prometheus"], record, both.feed.t0))
        vm = set(_series(q["VictoriaMetrics"], record, both.feed.t0))
        if prom != vm:
            diffs.append(f"{record}: Prometheus only [{_show(prom - vm)}], "
                         f"VictoriaMetrics only [{_show(vm - prom)}]")
        if not prom:
            empty.add(record)
    assert not diffs, "\n".join(diffs)
    # The simulated fleet never brakes for power and has no uncorrectable ECC error (that
    # rule records only GPUs that had one): every other rule has series to compare.
    assert empty <= {N.GPU_POWER_BRAKE, N.GPU_ECC}, (
        f"rules with no series, nothing compared: {empty}")


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    ratio = max(abs(a), abs(b)) <= 1.0
    return abs(a - b) <= (ABS_TOLERANCE if ratio else REL_TOLERANCE * max(abs(a), abs(b)))


@pytest.mark.parametrize("record", VALUES)
def test_key_rule_values_agree(both: Engines, record: str) -> None:
    """Within ABS_TOLERANCE for values up to 1 (ratios of time), REL_TOLERANCE above."""
    q = _queries(both)
    prom = _series(q["Prometheus"], record, both.feed.t0)
    vm = _series(q["VictoriaMetrics"], record, both.feed.t0)
    far = [f"{_show({k})}: {prom[k]:.4g} vs {vm[k]:.4g}" for k in prom.keys() & vm.keys()
           if not _close(prom[k], vm[k])]
    assert prom.keys() & vm.keys() or record == N.GPU_XID
    assert not far, "\n".join(far)


def _variables(board: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for var in board["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"]["query"])
        assert match, var["query"]
        out.append((f"${var['name']}", f"group by ({match[2]}) ({match[1]})"))
    return out


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_every_dashboard_query_gives_the_same_series(both: Engines, path: Path) -> None:
    q = _queries(both)
    board = load(path)
    diffs = []
    for title, expr in [*targets(board), *_variables(board)]:
        query = substitute(expr)
        prom = set(_series(q["Prometheus"], query, both.feed.t0))
        vm = set(_series(q["VictoriaMetrics"], query, both.feed.t0))
        if prom != vm:
            diffs.append(f"{title}: Prometheus only [{_show(prom - vm)}], "
                         f"VictoriaMetrics only [{_show(vm - prom)}]\n  {query}")
    assert not diffs, "\n".join(diffs)
