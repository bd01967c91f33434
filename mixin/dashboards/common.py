"""Pieces every dashboard shares: the datasource, the variables, the label filters, links."""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prom_model

from mixin.config import Config
from mixin.promql import PromQL

UIDS = {"fleet": "goodput-fleet", "node": "goodput-node", "serving": "goodput-serving"}


class Ctx:
    """What every panel needs from the configuration: the datasource, the label filters
    (Grafana variables inside; `=~".*"` also matches a missing label, so the optional
    cluster label may be absent) and the PromQL helpers. Data series carry no pod labels:
    namespace panels join goodput_gpu_pod_info."""

    def __init__(self, cfg: Config) -> None:
        lb = cfg.labels
        self.cfg = cfg
        self.q = PromQL(cfg)
        self.ds = model.DataSourceRef(type_val=cfg.grafana.datasource_type,
                                      uid=cfg.grafana.datasource_uid)
        self.tags = list(cfg.grafana.tags)
        self.cluster_f = f'{cfg.selector}, {lb.cluster}=~"$cluster"'
        self.node_f = f'{self.cluster_f}, {lb.node}=~"$node"'
        self.gpu_f = f'{self.node_f}, {lb.gpu}=~"$gpu"'
        self.model_f = f'{self.gpu_f}, model=~"$model"'
        self.ns_f = f'{lb.namespace}=~"$namespace"'
        self.ns = lb.namespace
        self.gk = self.q.gpu_key

    def legend(self, text: str) -> str:
        """A legend written with the default label names, in the configured ones."""
        lb = self.cfg.labels
        for default, name in (("node", lb.node), ("gpu", lb.gpu), ("namespace", lb.namespace)):
            text = text.replace(f"{{{{{default}}}}}", f"{{{{{name}}}}}")
        return text

    def by_namespace(self, expr: str) -> str:
        """``expr`` (one series per GPU) for the GPUs of the selected namespaces, labelled
        with their namespace (a GPU shared by two namespaces counts for both)."""
        return self.q.with_pods(expr, only_attributed=True, pod_labels=[self.ns],
                                info_matchers=self.ns_f)


def query(ctx: Ctx, expr: str, legend: str = "", ref: str = "A", instant: bool = False,
          table: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(ctx.ds)
    if legend:
        q = q.legend_format(ctx.legend(legend))
    if instant:
        q = q.instant()
    if table:
        q = q.format(prom_model.PromQueryFormat.TABLE)
    return q


def series(ctx: Ctx, title: str, unit: str, *targets: tuple[str, str], description: str = "",
           span: int = 12) -> timeseries.Panel:
    """A time series panel with one query per (expr, legend), refIds A, B, ..."""
    panel = timeseries.Panel().title(title).datasource(ctx.ds).unit(unit).height(8).span(span)
    if description:
        panel = panel.description(description)
    for i, (expr, legend) in enumerate(targets):
        panel = panel.with_target(query(ctx, expr, legend, ref=chr(ord("A") + i)))
    return panel


def _label_variable(ctx: Ctx, name: str, label: str, metric: str,
                    selector: str, label_name: str) -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(ctx.ds)
        .query({"query": f"label_values({metric}{{{selector}}}, {label_name})",
                "refId": name})
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(model.VariableOption(selected=True, text="All", value="$__all"))
    )


def variables(ctx: Ctx) -> list[Any]:
    """datasource, cluster (optional label), node, namespace, model, gpu."""
    lb = ctx.cfg.labels
    datasource = dash.DatasourceVariable("datasource").label("Data source").type(
        ctx.cfg.grafana.datasource_type)
    if ctx.cfg.grafana.datasource_name:
        name = ctx.cfg.grafana.datasource_name
        datasource = datasource.current(model.VariableOption(selected=True, text=name,
                                                             value=name))
    return [
        datasource,
        _label_variable(ctx, "cluster", "Cluster", "goodput_gpu_info", ctx.cfg.selector,
                        lb.cluster),
        _label_variable(ctx, "node", "Node", "goodput_gpu_info", ctx.cluster_f, lb.node),
        _label_variable(ctx, "namespace", "Namespace", "goodput_gpu_pod_info", ctx.node_f,
                        lb.namespace),
        _label_variable(ctx, "model", "Model", "goodput_gpu_tokens_total", ctx.node_f, "model"),
        _label_variable(ctx, "gpu", "GPU", "goodput_gpu_info", ctx.node_f, lb.gpu),
    ]


def base(ctx: Ctx, uid: str, title: str, description: str) -> dash.Dashboard:
    board = (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(ctx.tags)
        .editable()
        .time("now-3h", "now")
        .refresh("1m")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .variables(variables(ctx))
        .link(
            dash.DashboardLink("Goodput dashboards")
            .type(model.DashboardLinkType.DASHBOARDS)
            .tags(ctx.tags)
            .as_dropdown(False)
            .include_vars(True)
            .keep_time(True)
        )
    )
    return board


def drilldown_link(ctx: Ctx, title: str = "Open GPU drilldown") -> dash.DashboardLink:
    """A data link from a row with node and gpu columns to the Node / GPU drilldown."""
    lb = ctx.cfg.labels
    url = (f"/d/{UIDS['node']}?${{__url_time_range}}&${{datasource:queryparam}}"
           f"&var-node=${{__data.fields.{lb.node}}}&var-gpu=${{__data.fields.{lb.gpu}}}")
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
