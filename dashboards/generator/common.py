"""Pieces every dashboard shares: the datasource, the variables, the label filters, links."""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prom_model

TAG = "goodput"
DS = model.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Label filters, Grafana variables inside. `=~".*"` also matches a missing label, so the
# optional `cluster` label and the attribution label `namespace` can be absent.
NODE = 'cluster=~"$cluster", node=~"$node"'
SCOPE = f'{NODE}, namespace=~"$namespace"'
GPU = f'{SCOPE}, gpu=~"$gpu"'
MODEL = f'{GPU}, model=~"$model"'

UIDS = {"fleet": "goodput-fleet", "node": "goodput-node", "serving": "goodput-serving"}


def query(expr: str, legend: str = "", ref: str = "A", instant: bool = False,
          table: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DS)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant()
    if table:
        q = q.format(prom_model.PromQueryFormat.TABLE)
    return q


def series(title: str, unit: str, *targets: tuple[str, str], description: str = "",
           span: int = 12) -> timeseries.Panel:
    """A time series panel with one query per (expr, legend), refIds A, B, ..."""
    panel = timeseries.Panel().title(title).datasource(DS).unit(unit).height(8).span(span)
    if description:
        panel = panel.description(description)
    for i, (expr, legend) in enumerate(targets):
        panel = panel.with_target(query(expr, legend, ref=chr(ord("A") + i)))
    return panel


def _label_variable(name: str, label: str, metric: str, selector: str) -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query({"query": f"label_values({metric}{{{selector}}}, {name})" if selector
                else f"label_values({metric}, {name})", "refId": name})
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(model.VariableOption(selected=True, text="All", value="$__all"))
    )


def variables() -> list[Any]:
    """datasource, cluster (optional label), node, namespace, model, gpu."""
    return [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        _label_variable("cluster", "Cluster", "goodput_gpu_info", ""),
        _label_variable("node", "Node", "goodput_gpu_info", 'cluster=~"$cluster"'),
        _label_variable("namespace", "Namespace", "goodput_gpu_info", NODE),
        _label_variable("model", "Model", "goodput_gpu_tokens_total", SCOPE),
        _label_variable("gpu", "GPU", "goodput_gpu_info", SCOPE),
    ]


def base(uid: str, title: str, description: str) -> dash.Dashboard:
    board = (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags([TAG])
        .editable()
        .time("now-3h", "now")
        .refresh("1m")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .variables(variables())
        .link(
            dash.DashboardLink("Goodput dashboards")
            .type(model.DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(False)
            .include_vars(True)
            .keep_time(True)
        )
    )
    return board


def drilldown_link(title: str = "Open GPU drilldown") -> dash.DashboardLink:
    """A data link from a row with node and gpu columns to the Node / GPU drilldown."""
    url = (f"/d/{UIDS['node']}?${{__url_time_range}}&${{datasource:queryparam}}"
           "&var-node=${__data.fields.node}&var-gpu=${__data.fields.gpu}")
    return dash.DashboardLink(title).type(model.DashboardLinkType.LINK).url(url)


def _strip_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value if v is not None]
    return value


def to_json(board: dash.Dashboard) -> str:
    """Deterministic JSON without nulls (Grafana's schema rejects `null` options) and without
    a final newline, so the Helm chart's ConfigMaps (`|-` block scalars) carry it verbatim."""
    raw = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return json.dumps(_strip_nulls(raw), indent=2, sort_keys=True, ensure_ascii=False)
