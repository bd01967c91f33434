"""Pieces every dashboard shares: the datasource, the variables, the label filters, links."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.cog.builder import Builder
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
    namespace panels join goodput_gpu_pod_info.

    Recording rules (goodput:*) are filtered without the job selector: their names are the
    mixin's own, and an aggregation in a rule may drop `job`."""

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
        self.rule_cluster_f = f'{lb.cluster}=~"$cluster"'
        self.rule_gpu_f = f'{self.rule_cluster_f}, {lb.node}=~"$node", {lb.gpu}=~"$gpu"'
        self.rule_model_f = f'{self.rule_gpu_f}, model=~"$model"'
        self.rule_ns_f = f'{self.rule_cluster_f}, {self.ns_f}'
        self.rule_by_model_f = f'{self.rule_cluster_f}, model=~"$model"'

    def in_namespaces(self, expr: str) -> str:
        """``expr`` (per-GPU series) for the GPUs a pod of the selected namespaces holds; while
        every namespace in scope is selected (or attribution is off), every GPU, held or not.
        PromQL cannot test a variable for "All", so the second branch asks whether any pod in
        scope sits outside the selection."""
        pods = f"goodput_gpu_pod_info{{{self.gpu_f}, {self.ns_f}}}"
        outside = f'goodput_gpu_pod_info{{{self.gpu_f}, {self.ns}!~"$namespace"}}'
        return (f"(({expr}) and on ({self.gk}) {pods}\n"
                f"  or ({expr}) and on () absent({outside}))")

    def all_gpus_selected(self) -> str:
        """1 while the node and GPU variables select every GPU of the selected clusters."""
        return (f"absent(goodput_gpu_info{{{self.cluster_f}}}"
                f" unless goodput_gpu_info{{{self.gpu_f}}})")

    def one_per_gpu(self, expr: str, *labels: str) -> str:
        """``expr`` (raw series of the exporter) as one series per GPU and ``labels``: the
        highest over the scrape targets that report it. While an old and a new exporter pod
        both report a GPU (a surge rollout, a ServiceMonitor and a PodMonitor both on, or the
        old pod's last samples still inside the lookback), summing their series would count
        the GPU twice; the maximum reads it once. Sums over a GPU's engines, kinds or states
        come after this."""
        return f"max by ({', '.join([self.gk, *labels])}) ({expr})"

    def legend(self, text: str) -> str:
        """A legend written with the default label names, in the configured ones."""
        lb = self.cfg.labels
        for default, name in (("node", lb.node), ("gpu", lb.gpu), ("namespace", lb.namespace)):
            text = text.replace("{{" + default + "}}", "{{" + name + "}}")
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


def series(ctx: Ctx, title: str, unit: str, *targets: tuple[str, str], description: str,
           span: int = 12, no_value: str = "") -> timeseries.Panel:
    """A time series panel with one query per (expr, legend), refIds A, B, ..."""
    panel = (timeseries.Panel().title(title).description(description).datasource(ctx.ds)
             .unit(unit).height(8).span(span))
    if no_value:
        panel = panel.no_value(no_value)
    for i, (expr, legend) in enumerate(targets):
        panel = panel.with_target(query(ctx, expr, legend, ref=chr(ord("A") + i)))
    return panel


# Why a panel can be empty on a healthy install; shown in the panel (Grafana's noValue).
NEEDS_EXTENDED = ("No data: needs --extended-metrics on the exporter "
                  "(Helm: exporter.extendedMetrics=true).")
NO_ENGINE = ("No data: no serving engine in scope. Tokens come from the engines the exporters "
             "scrape (Helm: serving.targets or serving.discovery).")
NO_ENGINE_ON_NODES = ("No data: no serving engine on the selected nodes' GPUs (Helm: "
                      "serving.targets or serving.discovery). Pick a node that serves a model.")
NO_KUBERNETES = ("No data: needs Kubernetes pod attribution (goodput_gpu_pod_info from the "
                 "kubelet); bare-metal and Slurm nodes have no namespaces.")
NO_PROFILING = ("No data: no GPU in scope has a profiling source for SM activity (GPM on "
                "Hopper and newer, or DCGM).")
NO_JOBS = ("No multi-GPU job known: needs job identity (goodput_gpu_job_info, from any job "
           "source of docs/jobs.md) with two GPUs or more, and the global rule group "
           "goodput.global.job.")
NEEDS_ENGINE_SCRAPE = ("No data: Prometheus must scrape the vLLM/SGLang pods themselves "
                       "(e.g. a PodMonitor on the engines); the exporter does not re-export "
                       "their histograms.")


def _label_variable(ctx: Ctx, name: str, label: str, metric: str,
                    selector: str, label_name: str, *,
                    all_option: bool = True) -> dash.QueryVariable:
    """A multi-value variable over a label's values. Without ``all_option`` it has no "All"
    and Grafana opens on the first value: for boards that draw a line per GPU, where All
    would draw every GPU of the fleet (docs/scaling.md)."""
    var = (
        dash.QueryVariable(name)
        .label(label)
        .datasource(ctx.ds)
        .query({"query": f"label_values({metric}{{{selector}}}, {label_name})",
                "refId": name})
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
    )
    if not all_option:
        return var.include_all(False)
    return (var.include_all(True).all_value(".*")
            .current(model.VariableOption(selected=True, text="All", value="$__all")))


VARIABLES = ("cluster", "node", "namespace", "model", "gpu")


def variables(ctx: Ctx, names: tuple[str, ...] = VARIABLES,
              node_from: str | None = None) -> list[Any]:
    """datasource, then of cluster (optional label), node, namespace, model, gpu those a
    dashboard uses. With ``node_from`` (a metric) the node variable lists the nodes having
    it and opens on the first one instead of All."""
    lb = ctx.cfg.labels
    datasource = dash.DatasourceVariable("datasource").label("Data source").type(
        ctx.cfg.grafana.datasource_type)
    if ctx.cfg.grafana.datasource_name:
        name = ctx.cfg.grafana.datasource_name
        datasource = datasource.current(model.VariableOption(selected=True, text=name,
                                                             value=name))
    every = {
        "cluster": _label_variable(ctx, "cluster", "Cluster", "goodput_gpu_info",
                                   ctx.cfg.selector, lb.cluster),
        "node": _label_variable(ctx, "node", "Node", node_from or "goodput_gpu_info",
                                ctx.cluster_f, lb.node, all_option=node_from is None),
        "namespace": _label_variable(ctx, "namespace", "Namespace", "goodput_gpu_pod_info",
                                     ctx.node_f, lb.namespace),
        "model": _label_variable(ctx, "model", "Model", "goodput_gpu_tokens_total", ctx.node_f,
                                 "model"),
        "gpu": _label_variable(ctx, "gpu", "GPU", "goodput_gpu_info", ctx.node_f, lb.gpu),
    }
    return [datasource, *(every[name] for name in names)]


def base(ctx: Ctx, uid: str, title: str, description: str,
         names: tuple[str, ...] = VARIABLES, extra: list[Any] | None = None,
         node_from: str | None = None) -> dash.Dashboard:
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
        .variables(variables(ctx, names, node_from) + (extra or []))
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


PanelBuilder = Callable[[Ctx], Builder[model.Panel]]


def with_rows(ctx: Ctx, board: dash.Dashboard,
              rows: list[tuple[str, list[PanelBuilder]]]) -> dash.Dashboard:
    """``board`` with each row and the panels its builders make, in order."""
    for title, panels in rows:
        board.with_row(dash.Row(title))
        for panel in panels:
            board.with_panel(panel(ctx))
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


def panel_id(kind: str, title: str) -> int:
    """A panel's id, from its type and title: the same on every regeneration and whatever
    panels are added, removed or moved around it, so `viewPanel=<id>` links and alert panel
    links keep pointing at the same panel."""
    return zlib.crc32(f"{kind}:{title}".encode()) % 100_000 + 1


def _set_ids(raw: dict[str, Any]) -> None:
    seen: dict[int, str] = {}
    for panel in raw.get("panels", []):
        for p in (panel, *panel.get("panels", [])):
            pid = panel_id(p["type"], p["title"])
            if pid in seen:
                raise ValueError(f"panels {seen[pid]!r} and {p['title']!r} share id {pid}: "
                                 "retitle one")
            seen[pid] = p["title"]
            p["id"] = pid


def to_json(board: dash.Dashboard) -> str:
    """Deterministic JSON without nulls (Grafana's schema rejects `null` options) and without
    a final newline, so the Helm chart's ConfigMaps (`|-` block scalars) carry it verbatim."""
    raw = _strip_nulls(json.loads(json.dumps(board.build(), cls=JSONEncoder)))
    _set_ids(raw)
    return json.dumps(raw, indent=2, sort_keys=True, ensure_ascii=False)
