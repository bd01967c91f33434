"""The Grafana dashboards: generated from code, valid against Grafana's schema, and every
panel query parses and returns data from a real Prometheus holding the simulated node."""

from __future__ import annotations

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


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_variables(path: Path) -> None:
    board = load(path)
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "cluster", "node", "namespace", "model", "gpu"]
    for panel in panels(board):
        if panel.get("type") != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_queries_parse(path: Path) -> None:
    for title, expr in targets(load(path)):
        assert "goodput" in expr or "time_to_first_token" in expr, title
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
