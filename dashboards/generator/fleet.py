"""Fleet efficiency: where the money burns."""

from __future__ import annotations

from grafana_foundation_sdk.builders import bargauge, stat, table, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as model

from dashboards.generator.common import DS, GPU, MODEL, UIDS, base, drilldown_link, query

PRICE = "scalar(goodput:gpu_hour_price_dollars)"


def _stat(title: str, expr: str, unit: str, description: str) -> stat.Panel:
    return (stat.Panel().title(title).description(description).datasource(DS)
            .with_target(query(expr, instant=True)).unit(unit).height(4).span(4)
            .graph_mode(cm.BigValueGraphMode.AREA))


def build() -> dash.Dashboard:
    board = base(UIDS["fleet"], "GPU goodput / Fleet efficiency",
                 "Where GPU money burns: hollow utilisation, idle allocations, tokens per joule "
                 "and cost per million tokens, by model and namespace.")
    board.with_row(dash.Row("Fleet"))
    board.with_panel(_stat("GPUs", f"count(goodput_gpu_info{{{GPU}}})", "none",
                           "GPUs reported by the exporters in scope."))
    board.with_panel(_stat(
        "Busy but unproductive GPUs",
        f"count(goodput_gpu_busy_unproductive{{{GPU}}} == 1) or vector(0)", "none",
        "GPUs the exporter marks busy but unproductive (hollow busy or busy with no output)."))
    board.with_panel(_stat(
        "Kernel time (what nvidia-smi shows)",
        f"avg(goodput:gpu_utilization:ratio_rate5m{{{GPU}}})", "percentunit",
        "Average kernel-time utilisation: the figure most dashboards call utilisation."))
    board.with_panel(_stat("SM active (real work)",
                           f"avg(goodput:gpu_sm_active:ratio_rate5m{{{GPU}}})", "percentunit",
                           "Average fraction of time the SMs did work."))
    board.with_panel(_stat("Tokens/s", f"sum(goodput:gpu_tokens:rate5m{{{MODEL}}})", "short",
                           "Prompt + generation tokens per second of the serving engines."))
    board.with_panel(_stat(
        "Cost per million tokens",
        f"count(goodput:gpu_utilization:ratio_rate5m{{{GPU}}}) * {PRICE} / 3600 * 1e6"
        f" / sum(goodput:gpu_tokens:rate5m{{{GPU}}})",
        "currencyUSD",
        "Every GPU in scope (idle ones included) at the goodput:gpu_hour_price_dollars price, "
        "divided by the tokens they produced."))

    board.with_row(dash.Row("Busy but unproductive"))
    flagged = f"(goodput_gpu_busy_unproductive{{{GPU}}} == 1)"
    board.with_panel(
        table.Panel()
        .title("Busy but unproductive GPUs")
        .description("GPUs that look busy by kernel time but do little: with their pod, the "
                     "model they serve, why they are flagged and how hollow they are. Click a "
                     "row for the drilldown.")
        .datasource(DS)
        .with_target(query(
            f"{flagged} * on (node, gpu, uuid) group_left (model)"
            f" topk by (node, gpu, uuid) (1, goodput:gpu_model:info{{{GPU}}})"
            f" or on (node, gpu, uuid) {flagged}",
            ref="A", instant=True, table=True))
        .with_target(query(
            f"goodput:gpu_hollow_utilization:ratio_rate5m{{{GPU}}}"
            f" and on (node, gpu, uuid) {flagged}",
            ref="B", instant=True, table=True))
        .with_transformation(model.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(model.DataTransformerConfig(
            id_val="organize",
            options={"excludeByName": {"Time": True, "Value #A": True, "uuid": True,
                                       "job": True, "instance": True, "container": True},
                     "renameByName": {"Value #B": "hollow utilisation"}}))
        .data_links([drilldown_link()])
        .height(8).span(24)
    )

    board.with_row(dash.Row("Regimes and idle allocations"))
    board.with_panel(
        timeseries.Panel()
        .title("Regime mix over time")
        .description("How many GPUs sit in each bottleneck regime.")
        .datasource(DS)
        .with_target(query(f"sum by (regime) (goodput_gpu_regime{{{GPU}}})", "{{regime}}"))
        .stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
        .fill_opacity(60).unit("none").height(8).span(12)
    )
    board.with_panel(
        bargauge.Panel()
        .title("Allocated-idle GPU-hours by namespace")
        .description("GPU-hours in the time range during which a GPU was held but idle.")
        .datasource(DS)
        .with_target(query(
            f'sum by (namespace) (avg_over_time(goodput_gpu_regime{{{GPU}, '
            f'regime="allocated_idle"}}[$__range])) * $__range_s / 3600',
            "{{namespace}}", instant=True))
        .unit("h").orientation(cm.VizOrientation.HORIZONTAL).height(8).span(12)
    )
    board.with_panel(
        timeseries.Panel()
        .title("Hollow utilisation by namespace")
        .description("Kernel time with idle SMs, averaged over the namespace's GPUs.")
        .datasource(DS)
        .with_target(query(
            f"avg by (namespace) (goodput:gpu_hollow_utilization:ratio_rate5m{{{GPU}}})",
            "{{namespace}}"))
        .unit("percentunit").min(0).max(1).height(8).span(12)
    )
    board.with_panel(
        timeseries.Panel()
        .title("Allocated-idle GPUs by namespace")
        .datasource(DS)
        .with_target(query(
            f'sum by (namespace) (goodput_gpu_regime{{{GPU}, regime="allocated_idle"}})',
            "{{namespace}}"))
        .unit("none").height(8).span(12)
    )

    board.with_row(dash.Row("Tokens per joule and cost"))
    tokens = f"goodput:gpu_tokens:rate5m{{{MODEL}}}"
    for by in ("model", "namespace"):
        board.with_panel(
            timeseries.Panel()
            .title(f"Tokens per joule by {by}")
            .description("Tokens produced per joule of GPU energy.")
            .datasource(DS)
            .with_target(query(
                f"sum by ({by}) ({tokens}) / sum by ({by}) "
                f"({tokens} / goodput:gpu_tokens_per_joule:ratio_rate5m{{{MODEL}}})",
                f"{{{{{by}}}}}"))
            .unit("short").height(8).span(12)
        )
    for by in ("model", "namespace"):
        board.with_panel(
            timeseries.Panel()
            .title(f"Cost per million tokens by {by}")
            .description("GPU-hour price (goodput:gpu_hour_price_dollars) of the GPUs serving "
                         "it, per million tokens.")
            .datasource(DS)
            .with_target(query(
                f"sum by ({by}) (goodput:gpu_cost_per_million_tokens:dollars_rate5m{{{MODEL}}}"
                f" * {tokens}) / sum by ({by}) ({tokens})",
                f"{{{{{by}}}}}"))
            .unit("currencyUSD").height(8).span(12)
        )
    return board
