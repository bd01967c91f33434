"""The Grafana dashboards: generated from code, valid against Grafana's schema, and every
panel query parses and returns data from a real Prometheus holding the simulated node."""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import promql_parser
import pytest

from mixin.config import load as load_config
from mixin.dashboards import dashboard_files
from tests.support.backfill import backfilled_prometheus
from tests.support.prometheus import PrometheusServer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "dashboards"
SCHEMA = OUT / "schema" / "dashboard.schema.json"
BOARDS = sorted(OUT.glob("*.json"))
VARIABLES = {"cluster", "node", "namespace", "model", "gpu"}
# What Grafana substitutes for its built-in variables, matching the 30 minutes backfilled.
BUILTINS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range_s": "1800",
            "$__range": "30m"}


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def targets(board: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels(board) for t in p.get("targets", [])]


def substitute(expr: str) -> str:
    for name, value in BUILTINS.items():
        expr = expr.replace(name, value)
    return re.sub(r"\$\{?(\w+)\}?", lambda m: ".*" if m[1] in VARIABLES else m[0], expr)


def test_committed_json_is_regenerated() -> None:
    for name, text in dashboard_files(load_config()).items():
        assert (ROOT / name).read_text() == text, f"{name}: run python -m mixin"


def test_three_dashboards_with_links() -> None:
    uids = {load(p)["uid"] for p in BOARDS}
    assert uids == {"goodput-fleet", "goodput-node", "goodput-serving"}
    for path in BOARDS:
        board = load(path)
        assert {"type": "dashboards", "tags": ["goodput"]}.items() <= board["links"][0].items()


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_matches_grafana_schema(path: Path) -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(load(path))]
    assert errors == []


def test_schema_catches_a_bad_panel() -> None:
    schema = json.loads(SCHEMA.read_text())
    board = load(BOARDS[0])
    board["panels"][0]["gridPos"]["h"] = "eight"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(board, schema)


# The variables each dashboard defines; a variable defined and never used is a defect (the
# node dashboard once offered namespace and model filters that filtered nothing).
BOARD_VARIABLES = {
    "goodput-fleet": ["datasource", "cluster", "node", "namespace", "model", "gpu"],
    "goodput-node": ["datasource", "cluster", "node", "gpu"],
    "goodput-serving": ["datasource", "cluster", "node", "namespace", "model", "gpu"],
}


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_variables(path: Path) -> None:
    board = load(path)
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == BOARD_VARIABLES[path.stem]
    exprs = "\n".join(expr for _, expr in targets(board))
    for name in names[1:]:
        assert f"${name}" in exprs, f"${name} is defined but no panel uses it"


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_queries_parse(path: Path) -> None:
    for title, expr in targets(load(path)):
        assert "goodput" in expr, title
        try:
            promql_parser.parse(substitute(expr))
        except Exception as exc:  # promql_parser raises ValueError subclasses
            pytest.fail(f"{path.stem} / {title}: {exc}\n{substitute(expr)}")


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, float]]:
    end = float(int(time.time()))
    with backfilled_prometheus(tmp_path_factory.mktemp("backfill"), end) as server:
        yield server, end


def _query(server: PrometheusServer, expr: str, at: float) -> list[dict[str, Any]]:
    import json as _json
    import urllib.parse
    import urllib.request

    q = urllib.parse.urlencode({"query": expr, "time": str(at)})
    with urllib.request.urlopen(f"{server.url}/api/v1/query?{q}", timeout=10) as resp:
        body = _json.load(resp)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


@pytest.mark.integration
@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_every_query_returns_data(prom: tuple[PrometheusServer, float], path: Path) -> None:
    server, end = prom
    empty = [f"{title}: {expr}" for title, expr in targets(load(path))
             if not _query(server, substitute(expr), end)]
    assert empty == []


@pytest.mark.integration
@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_variable_queries_return_values(prom: tuple[PrometheusServer, float], path: Path) -> None:
    """label_values(metric{sel}, label), as Grafana runs it, has values (cluster aside:
    the simulated node has no cluster label, which is what "optional" means)."""
    server, end = prom
    for var in load(path)["templating"]["list"]:
        if var["type"] != "query" or var["name"] == "cluster":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"]["query"])
        assert match, var["query"]
        series = _query(server, f"group by ({match[2]}) ({substitute(match[1])})", end)
        assert [s for s in series if s["metric"].get(match[2])], var["name"]


# --- a bare node: every panel that is empty says why ----------------------------------------

# What a bare-metal node without engines, Kubernetes, job identity or --extended-metrics
# lacks: the families (as the recording names them, counters without `_total`) it never has.
BARE_PREFIXES = {
    "no Kubernetes": ("goodput_gpu_pod_", "goodput_attribution_available"),
    "no engine": ("goodput_gpu_tokens", "goodput_gpu_serving_", "goodput_gpu_kv_cache",
                  "goodput_gpu_mfu", "goodput_gpu_joules_per_token", "goodput_serving_",
                  "vllm:", "sglang:"),
    "no job identity": ("goodput_gpu_job_", "goodput_job_"),
}


def _bare(family: str) -> bool:
    optional = _optional_families()
    return (family in optional or f"{family}_total" in optional
            or any(family.startswith(p) for ps in BARE_PREFIXES.values() for p in ps))


@pytest.fixture(scope="module")
def bare_prom(tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[PrometheusServer, float]]:
    end = float(int(time.time()))
    with backfilled_prometheus(tmp_path_factory.mktemp("bare"), end, drop=_bare) as server:
        yield server, end


@pytest.mark.integration
@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_empty_panels_say_why_on_a_bare_node(bare_prom: tuple[PrometheusServer, float],
                                             path: Path) -> None:
    """On a node without engines, Kubernetes, job identity and extended metrics, every panel
    left without data shows a no-data text naming what it needs (issue #34)."""
    server, end = bare_prom
    assert not _query(server, "goodput_gpu_pod_info", end), "the bare node has pods"
    assert _query(server, "goodput_gpu_info", end), "the bare node has no GPUs"
    silent, empty = [], []
    for panel in panels(load(path)):
        if panel["type"] == "row":
            continue
        if any(_query(server, substitute(t["expr"]), end) for t in panel["targets"]):
            continue
        empty.append(panel["title"])
        no_value = panel["fieldConfig"]["defaults"].get("noValue", "")
        if not re.search(r"serving|engine|Kubernetes|pod|job|--extended-metrics|profiling|"
                         r"scrape", no_value):
            silent.append(f"{panel['title']}: {no_value!r}")
    assert silent == []
    assert empty, "the bare node left no panel empty: the test checks nothing"


def test_job_stragglers_tell_no_job_from_no_straggler() -> None:
    """Empty means no multi-GPU job is known (the no-data text says what identifies jobs),
    or no GPU of a job waits at most half as much as its peers; the gap is coloured from the
    alert's threshold."""
    board = load(OUT / "goodput-fleet.json")
    panel = next(p for p in panels(board) if p["title"] == "Job stragglers")
    assert "No multi-GPU job known" in panel["fieldConfig"]["defaults"]["noValue"]
    threshold = load_config().alerts["GPUJobStraggler"].thresholds["min_waiting_gap"]
    steps = [prop["value"]["steps"] for o in panel["fieldConfig"]["overrides"]
             for prop in o["properties"] if prop["id"] == "thresholds"]
    assert steps == [[{"color": "green"}, {"color": "red", "value": threshold}]]


@pytest.mark.integration
def test_job_stragglers_name_the_simulated_straggler(prom: tuple[PrometheusServer, float]
                                                     ) -> None:
    """The simulated node's job: GPU 2 works while GPU 5 waits on it."""
    server, end = prom
    expr = substitute(_target("goodput-fleet", "Job stragglers"))
    rows = {s["metric"]["gpu"]: float(s["value"][1]) for s in _query(server, expr, end)}
    threshold = load_config().alerts["GPUJobStraggler"].thresholds["min_waiting_gap"]
    assert set(rows) == {"2"} and rows["2"] >= threshold
    hours = _query(server, substitute(_target("goodput-fleet", "GPU-hours lost waiting, by job")),
                   end)
    assert [s["metric"]["job_id"] for s in hours] == ["llama-train"]
    assert float(hours[0]["value"][1]) > 0


@pytest.mark.integration
def test_job_time_split_stacks_each_jobs_parts(prom: tuple[PrometheusServer, float]) -> None:
    """The simulated node's job: GPU 2 works all the time, GPU 5 waits 0.6 of it; one bar
    for the job, its parts adding up to its 2 GPUs, 30 % of them waiting."""
    server, end = prom
    rows = _query(server, substitute(_target("goodput-fleet", "Time split of each job")), end)
    assert {r["metric"]["job_key"] for r in rows} == {"kubernetes inference llama-train"}
    parts = {r["metric"]["part"]: float(r["value"][1]) for r in rows}
    assert set(parts) == {"working", "waiting"}
    # Averaged over the 30 backfilled minutes, the first rate window of which reads low.
    assert 1.7 < sum(parts.values()) <= 2.0001
    assert parts["waiting"] / sum(parts.values()) == pytest.approx(0.3, abs=0.01)


# --- Grafana dashboard-linter's rules, applied to every panel of every dashboard ----------

RANGED = re.compile(r"\b(rate|irate|increase)\((?:[^()\[]|\([^()]*\))*\[([^\]]+)\]")


def lint(board: dict[str, Any]) -> list[str]:
    """What grafana/dashboard-linter would report for ``board`` (the rules this project
    holds itself to): a templated Prometheus datasource used by every panel and target, a
    description and a unit on every panel, unique ids, and rate()/irate()/increase() over
    $__rate_interval (or over $__range in an instant query: a deliberate whole-range total).
    Query variables reload on time-range change."""
    problems: list[str] = []
    variables = board["templating"]["list"]
    ds = [v for v in variables if v["type"] == "datasource"]
    if [(v["name"], v["query"]) for v in ds] != [("datasource", "prometheus")]:
        problems.append("no templated prometheus datasource variable named datasource")
    for var in variables:
        if var["type"] == "query" and var.get("refresh") != 2:
            problems.append(f"variable {var['name']}: not reloaded on time-range change")
    want = {"type": "prometheus", "uid": "${datasource}"}
    seen: set[int] = set()
    for panel in panels(board):
        title = panel.get("title", "?")
        pid = panel.get("id")
        if not isinstance(pid, int) or pid in seen:
            problems.append(f"{title}: id {pid!r} missing or not unique")
        seen.add(pid) if isinstance(pid, int) else None
        if panel["type"] == "row":
            continue
        if not panel.get("description", "").strip():
            problems.append(f"{title}: no description")
        if not panel.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            problems.append(f"{title}: no unit")
        if panel.get("datasource") != want:
            problems.append(f"{title}: panel datasource is not ${{datasource}}")
        if not panel.get("targets"):
            problems.append(f"{title}: no targets")
        for target in panel.get("targets", []):
            if target.get("datasource") != want:
                problems.append(f"{title}/{target['refId']}: datasource is not ${{datasource}}")
            for func, window in RANGED.findall(target["expr"]):
                whole_range = window == "$__range" and target.get("instant")
                if window != "$__rate_interval" and not whole_range:
                    problems.append(f"{title}/{target['refId']}: {func}() over [{window}]")
    return problems


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_dashboard_linter_rules(path: Path) -> None:
    assert lint(load(path)) == []


def test_lint_catches_each_kind_of_problem() -> None:
    board = load(OUT / "goodput-node.json")
    victim = next(p for p in panels(board) if p["type"] == "timeseries")
    victim["description"] = ""
    del victim["fieldConfig"]["defaults"]["unit"]
    victim["targets"][0]["expr"] = "rate(goodput_gpu_utilization_seconds_total[5m])"
    victim["targets"][0]["datasource"] = {"type": "prometheus", "uid": "prom-1"}
    next(p for p in panels(board) if p is not victim)["id"] = victim["id"]
    problems = "\n".join(lint(board))
    for needle in ("no description", "no unit", "over [5m]", "datasource is not",
                   "not unique"):
        assert needle in problems


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_panel_ids_are_stable(path: Path) -> None:
    """Ids come from each panel's type and title, not its position: adding or moving a
    panel never renumbers the others (viewPanel links keep working)."""
    from mixin.dashboards.common import panel_id

    for panel in panels(load(path)):
        assert panel["id"] == panel_id(panel["type"], panel["title"])


# --- every panel applies the dashboard's filters, or says why not -------------------------

FILTER_WORDS = {"cluster": "cluster", "node": "node", "gpu": "gpu", "namespace": "namespace"}


def _waived(description: str) -> set[str]:
    """Variables a panel's description says do not apply to it."""
    out: set[str] = set()
    for sentence in re.split(r"(?<=\.) ", description):
        if "not apply" in sentence:
            words = set(re.findall(r"[a-z]+", sentence.lower()))
            out |= {var for var, word in FILTER_WORDS.items() if word in words}
    return out


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_every_panel_applies_the_filters_or_says_why_not(path: Path) -> None:
    board = load(path)
    defined = {v["name"] for v in board["templating"]["list"]} & set(FILTER_WORDS)
    missing = []
    for panel in panels(board):
        if panel["type"] == "row":
            continue
        expected = defined - _waived(panel["description"])
        for target in panel["targets"]:
            missing += [f"{panel['title']}/{target['refId']}: ${var}" for var in sorted(expected)
                        if f"${var}" not in target["expr"]]
    assert missing == []


# --- panels that are empty on a healthy install say why ------------------------------------


@functools.cache
def _optional_families() -> frozenset[str]:
    from exporter.collectors import REGISTRY
    from exporter.wiring.config import Settings

    settings = Settings(simulate=True)
    return frozenset(fam.name for collector in REGISTRY
                     for group in collector.families(settings)
                     for fam in group.families if not fam.default)


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_panels_needing_more_than_the_defaults_say_why(path: Path) -> None:
    """A panel reading a family outside the default set (docs/metrics.md "optional") names
    --extended-metrics in its description, and in its no-data text when it reads nothing
    else; a panel reading the engines' own histograms says they must be scraped directly."""
    optional = _optional_families()
    assert "goodput_gpu_power_limit_watts" in optional
    for panel in panels(load(path)):
        if panel["type"] == "row":
            continue
        exprs = [t["expr"] for t in panel["targets"]]
        reads = [set(re.findall(r"\bgoodput_[a-z0-9_]+", e)) for e in exprs]
        no_value = panel["fieldConfig"]["defaults"].get("noValue", "")
        if any(r & optional for r in reads):
            assert "--extended-metrics" in panel["description"], panel["title"]
        if all(r & optional for r in reads):
            assert "--extended-metrics" in no_value, panel["title"]
        if any("ttft" in e for e in exprs):
            assert "scrape" in no_value and "directly" in panel["description"], panel["title"]


# --- the numbers on the panels, in promtool -------------------------------------------------


def _target(board: str, title: str, ref: str = "A", kind: str = "") -> str:
    panel = next(p for p in panels(load(OUT / f"{board}.json"))
                 if p["title"] == title and kind in ("", p["type"]))
    return str(next(t["expr"] for t in panel["targets"] if t["refId"] == ref))


def _fill(expr: str, **values: str) -> str:
    """``expr`` as Grafana would send it: the named variables set, the others All."""
    for name, value in values.items():
        expr = expr.replace(f"${name}", value)
    return substitute(expr)


def _promtool_expr(tmp_path: Path, series: list[dict[str, str]], interval: str,
                   cases: list[dict[str, Any]]) -> None:
    import subprocess

    import yaml

    from tests.support.prometheus import require

    rules = (ROOT / "alerts" / "goodput.rules.yml").read_text()
    (tmp_path / "rules.yml").write_text(rules)
    order = [group["name"] for group in yaml.safe_load(rules)["groups"]]
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yml"], "evaluation_interval": "1m", "group_eval_order": order,
        "tests": [{"interval": interval, "input_series": series, "promql_expr_test": cases}]}))
    result = subprocess.run([require("promtool"), "test", "rules", str(tmp_path / "test.yml")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


SEL = 'job="gpu-goodput-exporter", instance="n:9433"'


def test_busy_but_unproductive_counts_gpus_not_reasons(tmp_path: Path) -> None:
    busy = "goodput_gpu_busy_unproductive"
    series = [
        {"series": f'{busy}{{{SEL}, node="a", gpu="0", reason="hollow_busy"}}', "values": "1x5"},
        {"series": f'{busy}{{{SEL}, node="a", gpu="0", reason="busy_no_output"}}',
         "values": "1x5"},
        {"series": f'{busy}{{{SEL}, node="b", gpu="0", reason="hollow_busy"}}', "values": "1x5"},
    ]
    expr = _fill(_target("goodput-fleet", "Busy but unproductive GPUs", kind="stat"))
    _promtool_expr(tmp_path, series, "1m",
                   [{"expr": expr, "eval_time": "4m", "exp_samples": [{"labels": "{}",
                                                                      "value": 2}]}])


def test_energy_in_range_keeps_each_node(tmp_path: Path) -> None:
    energy = "goodput_gpu_energy_joules_total"
    series = [{"series": f'{energy}{{{SEL}, node="{n}", gpu="0"}}', "values": f"0+{j}x60"}
              for n, j in (("a", 3.6e4), ("b", 7.2e4))]
    expr = _fill(_target("goodput-node", "Energy in range"), __range="1h")
    _promtool_expr(tmp_path, series, "1m", [{"expr": expr, "eval_time": "60m", "exp_samples": [
        {"labels": '{node="a", gpu="0"}', "value": 0.6},
        {"labels": '{node="b", gpu="0"}', "value": 1.2}]}])


def test_allocated_idle_hours_count_idle_time_not_the_range(tmp_path: Path) -> None:
    """The issue's case: a GPU allocated-idle for 10 minutes of a 3 h range is 0.17 GPU-hours
    (the old panel said 3), and a namespace whose GPU was never idle shows nothing."""
    secs = "goodput_gpu_regime_seconds_total"
    idle = "0x60 " + " ".join(str(60 * i) for i in range(1, 11)) + " 600x109"
    busy = "0+60x60 " + " ".join(["3600"] * 10) + " 3600+60x109"
    info = "goodput_gpu_pod_info"
    series = [
        {"series": f'{secs}{{{SEL}, node="a", gpu="0", regime="allocated_idle"}}',
         "values": idle},
        {"series": f'{secs}{{{SEL}, node="a", gpu="0", regime="compute_bound"}}',
         "values": busy},
        {"series": f'{secs}{{{SEL}, node="a", gpu="1", regime="compute_bound"}}',
         "values": "0+60x180"},
        {"series": f'{info}{{{SEL}, node="a", gpu="0", namespace="research", pod="nb-0", '
                   'container="main"}', "values": "1x180"},
        {"series": f'{info}{{{SEL}, node="a", gpu="1", namespace="inference", pod="llm-0", '
                   'container="main"}', "values": "1x180"},
        # The node's exporter answers throughout (the rules read only live nodes).
        {"series": f'goodput_exporter_build_info{{{SEL}, node="a"}}', "values": "1x180"},
    ]
    expr = _fill(_target("goodput-fleet", "Allocated-idle GPU-hours by namespace"),
                 __range="3h")
    _promtool_expr(tmp_path, series, "1m", [{
        "expr": f"round({expr}, 0.01)", "eval_time": "180m",
        "exp_samples": [{"labels": '{namespace="research"}', "value": 0.17}]}])


def test_namespace_filter_narrows_the_fleet_stats(tmp_path: Path) -> None:
    """All namespaces: every GPU, held or not (GPU 3 is); some namespaces: only the GPUs
    their pods hold."""
    info = "goodput_gpu_info"
    pod = "goodput_gpu_pod_info"
    series = [{"series": f'{info}{{{SEL}, node="a", gpu="{g}", uuid="GPU-{g}", name="H100"}}',
               "values": "1x5"} for g in range(4)]
    series += [{"series": f'{pod}{{{SEL}, node="a", gpu="{g}", namespace="{ns}", '
                          f'pod="p-{g}", container="main"}}', "values": "1x5"}
               for g, ns in enumerate(("research", "inference", "batch"))]
    gpus = _target("goodput-fleet", "GPUs")
    _promtool_expr(tmp_path, series, "1m", [
        {"expr": _fill(gpus), "eval_time": "4m", "exp_samples": [{"labels": "{}", "value": 4}]},
        {"expr": _fill(gpus, namespace="research"), "eval_time": "4m",
         "exp_samples": [{"labels": "{}", "value": 1}]},
        {"expr": _fill(gpus, namespace="research|inference"), "eval_time": "4m",
         "exp_samples": [{"labels": "{}", "value": 2}]},
    ])


@pytest.mark.integration
def test_ttft_is_per_model_from_the_recorded_histogram(
        prom: tuple[PrometheusServer, float]) -> None:
    """The TTFT panel reads goodput:model_ttft_seconds_bucket:rate5m (a few series per model,
    not every engine pod's buckets) and follows the model and namespace filters."""
    server, end = prom
    expr = _target("goodput-serving", "Time to first token (p50, p90)")
    assert "goodput:model_ttft_seconds_bucket:rate5m" in expr
    result = _query(server, _fill(expr), end)
    assert result and all(0 < float(s["value"][1]) < 60 for s in result)
    assert _query(server, _fill(expr, model="no-such-model"), end) == []
    assert _query(server, _fill(expr, namespace="no-such-namespace"), end) == []


@pytest.mark.parametrize("board, node_metric", [("goodput-node", "goodput_gpu_info"),
                                                ("goodput-serving", "goodput_gpu_info")])
def test_per_gpu_boards_open_on_one_node(board: str, node_metric: str) -> None:
    """The boards that draw a line per GPU open on the first node, never All: with All they
    would draw every GPU of the fleet (8-70 s a panel at 8,000 GPUs, docs/benchmarks.md).
    The node list comes from a series every node has (issue #34): a node without engines is
    listed, and its serving panels say why they are empty."""
    node = next(v for v in load(OUT / f"{board}.json")["templating"]["list"]
                if v["name"] == "node")
    assert not node.get("includeAll") and "current" not in node
    assert node["query"]["query"].startswith(f"label_values({node_metric}{{")


def test_busy_table_survives_both_reasons_and_an_exporter_rollover(tmp_path: Path) -> None:
    """A GPU flagged for both reasons, reported by an old and a new exporter pod inside the
    window, is one GPU in the table's joins (no many-to-many error) with both reasons."""
    busy = "goodput_gpu_busy_unproductive"
    series = []
    for instance in ("old:9433", "new:9433"):
        sel = f'job="gpu-goodput-exporter", instance="{instance}", node="a", gpu="0"'
        series += [
            {"series": f'{busy}{{{sel}, reason="hollow_busy"}}', "values": "1x5"},
            {"series": f'{busy}{{{sel}, reason="busy_no_output"}}', "values": "1x5"},
            {"series": f'goodput_gpu_info{{{sel}, uuid="GPU-0", name="H100"}}', "values": "1x5"},
            {"series": f'goodput_gpu_pod_info{{{sel}, namespace="inference", pod="llm-0", '
                       'container="main"}', "values": "1x5"},
        ]
    a = _fill(_target("goodput-fleet", "Busy but unproductive GPUs", "A", "table"))
    c = _fill(_target("goodput-fleet", "Busy but unproductive GPUs", "C", "table"))
    _promtool_expr(tmp_path, series, "1m", [
        {"expr": f"count(group by (namespace, pod, name) ({a}))", "eval_time": "4m",
         "exp_samples": [{"labels": "{}", "value": 1}]},
        {"expr": c, "eval_time": "4m", "exp_samples": [
            {"labels": '{node="a", gpu="0", reason="hollow_busy"}', "value": 1},
            {"labels": '{node="a", gpu="0", reason="busy_no_output"}', "value": 1}]},
    ])


def test_per_gpu_panels_count_a_gpu_once_across_exporter_pods(tmp_path: Path) -> None:
    """A rollover: GPU a/0 reported by an old and a new exporter pod at once (a surge
    rollout, or a ServiceMonitor and a PodMonitor both on), and, for the queue, by an old pod
    whose last sample still sits in the lookback after the new one took over. Each panel
    shows the GPU once with the one pod's value; a sum over the pods showed it doubled."""
    def sel(instance: str, extra: str = "") -> str:
        return f'job="gpu-goodput-exporter", instance="{instance}", node="a", gpu="0"{extra}'

    m = ', model="m", engine="vllm"'
    series = []
    for pod in ("old:9433", "new:9433"):
        series += [
            {"series": f'goodput_gpu_tokens_total{{{sel(pod, m)}, kind="prompt"}}',
             "values": "0+600x10"},
            {"series": f'goodput_gpu_tokens_total{{{sel(pod, m)}, kind="generation"}}',
             "values": "0+120x10"},
            {"series": f"goodput_gpu_sm_active_seconds_total{{{sel(pod)}}}",
             "values": "0+30x10"},
            {"series": f"goodput_gpu_profiled_seconds_total{{{sel(pod)}}}", "values": "0+60x10"},
            {"series": f"goodput_gpu_utilization_seconds_total{{{sel(pod)}}}",
             "values": "0+54x10"},
            {"series": f'goodput_gpu_clock_event_seconds_total{{{sel(pod)}, '
                       'reason="hw_power_brake_slowdown"}', "values": "0+6x10"},
            {"series": f"goodput_gpu_kv_cache_usage_ratio{{{sel(pod, m)}}}", "values": "0.25x10"},
            {"series": f"goodput_gpu_mfu_ratio{{{sel(pod)}}}", "values": "0.4x10"},
        ]
    # The queue: the old pod's last sample (5m) is still in the 5m lookback at 7m.
    waiting = f'goodput_gpu_serving_requests{{{sel("old:9433", m)}, state="waiting"}}'
    series += [{"series": waiting, "values": "3x5"},
               {"series": waiting.replace("old:9433", "new:9433"), "values": "_x6 3x4"}]

    def one(expr: str, value: float, labels: str = 'gpu="0", node="a"',
            at: str = "10m") -> dict[str, Any]:
        return {"expr": f"round({_fill(expr)}, 0.001)", "eval_time": at,
                "exp_samples": [{"labels": f"{{{labels}}}", "value": value}]}

    tokens = "Tokens/s per GPU vs SM active"
    lie = "The utilization lie: kernel time vs SM active vs tensor vs DRAM (GPU $gpu)"
    _promtool_expr(tmp_path, series, "1m", [
        one(_target("goodput-serving", tokens, "A"), 12, 'gpu="0", model="m", node="a"'),
        one(_target("goodput-serving", tokens, "B"), 0.5),
        one(_target("goodput-serving", "Queue: running and waiting requests"), 3,
            'gpu="0", model="m", node="a", state="waiting"', at="7m"),
        one(_target("goodput-serving", "KV cache usage"), 0.25,
            'engine="vllm", gpu="0", model="m", node="a"'),
        one(_target("goodput-serving", "MFU (model FLOPs utilisation)"), 0.4),
        one(_target("goodput-node", lie, "A"), 0.9),
        one(_target("goodput-node", lie, "B"), 0.5),
        one(_target("goodput-node", "Throttling (share of time clocks were held down)"), 0.1,
            'gpu="0", node="a", reason="hw_power_brake_slowdown"'),
    ])
