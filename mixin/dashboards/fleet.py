"""Fleet efficiency: where the money burns."""

from __future__ import annotations

from grafana_foundation_sdk.builders import bargauge, stat, table, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as model

from mixin.config import seconds
from mixin.dashboards.common import UIDS, Ctx, base, drilldown_link, query

PRICE = "scalar(goodput:gpu_hour_price_dollars)"


def _stat(ctx: Ctx, title: str, expr: str, unit: str, description: str) -> stat.Panel:
    return (stat.Panel().title(title).description(description).datasource(ctx.ds)
            .with_target(query(ctx, expr, instant=True)).unit(unit).height(4).span(4)
            .graph_mode(cm.BigValueGraphMode.AREA))


RULE_SCOPE = (" Read from the recording rule {rule}, which is per {by}: the node and GPU "
              "filters do not apply.")


NO_NAMESPACE = " The namespace filter does not apply either."


def build(ctx: Ctx) -> dash.Dashboard:
    gpu, gk, ns = ctx.gpu_f, ctx.gk, ctx.ns
    rgpu, rmodel = ctx.rule_gpu_f, ctx.rule_model_f
    in_ns = ctx.in_namespaces
    board = base(ctx, UIDS["fleet"], "GPU goodput / Fleet efficiency",
                 "Where GPU money burns: hollow utilisation, idle allocations, tokens per joule "
                 "and cost per million tokens, by model and namespace.")
    board.with_row(dash.Row("Fleet"))
    # One series per GPU whatever the scrape targets (a replaced exporter pod overlaps its
    # successor for a rate window).
    util = in_ns(f"max by ({gk}) (goodput:gpu_utilization:ratio_rate5m{{{rgpu}}})")
    board.with_panel(_stat(
        ctx, "GPUs", f"count({in_ns(f'group by ({gk}) (goodput_gpu_info{{{gpu}}})')})", "none",
        "GPUs reported by the exporters in scope (cluster, node, GPU and namespace filters)."))
    board.with_panel(_stat(
        ctx, "Busy but unproductive GPUs",
        f"count({in_ns(f'group by ({gk}) (goodput_gpu_busy_unproductive{{{gpu}}} == 1)')})"
        " or vector(0)", "none",
        "GPUs the exporter marks busy but unproductive (hollow busy, busy with no output or "
        "both: each GPU counts once)."))
    board.with_panel(_stat(
        ctx, "Kernel time (what nvidia-smi shows)", f"sum({util}) / count({util})",
        "percentunit",
        "Kernel-time utilisation over every GPU in scope: the figure most dashboards call "
        "utilisation."))
    sm = in_ns(f"max by ({gk}) (goodput:gpu_sm_active_seconds:rate5m{{{rgpu}}})")
    prof = in_ns(f"max by ({gk}) (goodput:gpu_profiled:ratio_rate5m{{{rgpu}}})")
    board.with_panel(_stat(
        ctx, "SM active (real work)", f"sum({sm}) / sum({prof})", "percentunit",
        "SM-active time over profiled time, summed over the GPUs in scope."))
    tokens = in_ns(f"goodput:gpu_tokens:rate5m{{{rmodel}}}")
    board.with_panel(_stat(ctx, "Tokens/s", f"sum({tokens})", "short",
                           "Prompt + generation tokens per second of the serving engines."))
    all_tokens = in_ns(f"goodput:gpu_tokens:rate5m{{{rgpu}}}")
    board.with_panel(_stat(
        ctx, "Cost per million tokens",
        f"count({util}) * {PRICE} / 3600 * 1e6 / sum({all_tokens})", "currencyUSD",
        "Every GPU in scope (idle ones included) at the goodput:gpu_hour_price_dollars price, "
        "divided by the tokens they produced."))

    board.with_row(dash.Row("Busy but unproductive"))
    flagged = f"(goodput_gpu_busy_unproductive{{{gpu}}} == 1)"
    # One series per GPU on the "one" side of every join: a GPU flagged for both reasons, or
    # reported by an old and a new exporter pod, must not break the group_left/right joins.
    one_per_gpu = f"max by ({gk}) {flagged}"
    with_model = (f"{one_per_gpu} * on ({gk}) group_left (model)"
                  f" topk by ({gk}) (1, goodput:gpu_model:info{{{rgpu}}})"
                  f" or on ({gk}) {one_per_gpu}")
    board.with_panel(
        table.Panel()
        .title("Busy but unproductive GPUs")
        .description("GPUs that look busy by kernel time but do little: with their name, pod, "
                     "the model they serve, why they are flagged (a row per reason) and how "
                     "hollow they are. Click a row for the drilldown.")
        .datasource(ctx.ds)
        .with_target(query(
            ctx,
            f"({ctx.q.with_pods(in_ns(with_model), ['model'])})"
            f" * on ({gk}) group_left (name) group by ({gk}, name) (goodput_gpu_info{{{gpu}}})",
            ref="A", instant=True, table=True))
        .with_target(query(
            ctx,
            f"max by ({gk}) (goodput:gpu_hollow_utilization:ratio_rate5m{{{rgpu}}})"
            f" and on ({gk}) {in_ns(flagged)}",
            ref="B", instant=True, table=True))
        .with_target(query(ctx, f"group by ({gk}, reason) {in_ns(flagged)}", ref="C",
                           instant=True, table=True))
        .with_transformation(model.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(model.DataTransformerConfig(
            id_val="organize",
            options={"excludeByName": {"Time": True, "Value #A": True, "Value #C": True,
                                       "job": True, "instance": True, "container": True},
                     "renameByName": {"Value #B": "hollow utilisation"}}))
        .data_links([drilldown_link(ctx)])
        .unit("percentunit").no_value("No GPU is busy but unproductive.")
        .height(8).span(24)
    )

    board.with_row(dash.Row("Regimes and idle allocations"))
    board.with_panel(
        timeseries.Panel()
        .title("Regime mix over time")
        .description("How many GPUs sit in each bottleneck regime (the exporter's debounced "
                     "state)." + RULE_SCOPE.format(rule="goodput:regime_gpus:sum",
                                                  by="cluster and regime")
                     + NO_NAMESPACE)
        .datasource(ctx.ds)
        .with_target(query(ctx, f"goodput:regime_gpus:sum{{{ctx.rule_cluster_f}}}",
                           "{{regime}}"))
        .stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
        .fill_opacity(60).unit("none").height(8).span(12)
    )
    regime = in_ns(f"max by ({gk}, regime) (goodput:gpu_regime:ratio_rate5m{{{rgpu}}})")
    board.with_panel(
        timeseries.Panel()
        .title("Share of GPU time per regime")
        .description("Every window counted, undebounced (goodput_gpu_regime_seconds_total): "
                     "a burst of a few seconds shows here even when the regime state above "
                     "never switched.")
        .datasource(ctx.ds)
        .with_target(query(ctx, f"sum by (regime) ({regime})"
                                f" / scalar(count({util}))", "{{regime}}"))
        .stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
        .fill_opacity(60).unit("percentunit").height(8).span(12)
    )
    board.with_panel(
        table.Panel()
        .title("Job stragglers")
        .description("The GPU holding each multi-GPU job back: its SM activity leads the "
                     "average of the job's other GPUs (on any node) by the gap shown; they "
                     "wait for it in collectives (GPUJobStraggler). Needs pod attribution with "
                     "job labels (kubernetes.podLabels).")
        .datasource(ctx.ds)
        .with_target(query(
            ctx, f"goodput:job_straggler:gap_rate5m{{{rgpu}, {ctx.ns_f}}}",
            ref="A", instant=True, table=True))
        .with_transformation(model.DataTransformerConfig(
            id_val="organize",
            options={"excludeByName": {"Time": True},
                     "renameByName": {"Value": "SM-active lead over peers"}}))
        .data_links([drilldown_link(ctx)])
        .unit("percentunit").no_value("No straggler in the jobs in scope.")
        .height(8).span(12)
    )
    step = ctx.cfg.rule_interval or "1m"
    idle_share = (f"max by ({gk}) (goodput:gpu_regime:ratio_rate5m"
                  f'{{{rgpu}, regime="allocated_idle"}})')
    board.with_panel(
        bargauge.Panel()
        .title("Allocated-idle GPU-hours by namespace")
        .description("GPU-hours in the time range during which a GPU was held by a pod of the "
                     "namespace but idle: the exact time (goodput_gpu_regime_seconds_total, "
                     "through goodput:gpu_regime:ratio_rate5m), each rule evaluation "
                     "attributed to the namespace holding the GPU then.")
        .datasource(ctx.ds)
        .with_target(query(
            ctx,
            f"sum by ({ns}) (sum_over_time((\n{ctx.by_namespace(idle_share)}\n)[$__range:{step}]))"
            f" * {seconds(step):g} / 3600",
            f"{{{{{ns}}}}}", instant=True))
        .unit("h").orientation(cm.VizOrientation.HORIZONTAL)
        .no_value("No GPU was allocated and idle (needs pod attribution).")
        .height(8).span(12)
    )
    ns_rule = ctx.rule_ns_f
    board.with_panel(
        timeseries.Panel()
        .title("Hollow utilisation by namespace")
        .description("Kernel time with idle SMs over the namespace's profiled GPUs: kernel "
                     "time minus SM-active time, both summed over the GPUs, not averaged."
                     + RULE_SCOPE.format(
                         rule="goodput:namespace_hollow_utilization:ratio_avg_rate5m",
                         by="cluster and namespace"))
        .datasource(ctx.ds)
        .with_target(query(
            ctx, f"goodput:namespace_hollow_utilization:ratio_avg_rate5m{{{ns_rule}}}",
            f"{{{{{ns}}}}}"))
        .unit("percentunit").min(0).max(1).height(8).span(12)
    )
    board.with_panel(
        timeseries.Panel()
        .title("Allocated-idle GPUs by namespace")
        .description("GPUs a pod of the namespace holds while they sit idle (the exporter's "
                     "allocated_idle regime)."
                     + RULE_SCOPE.format(rule="goodput:namespace_allocated_idle_gpus:sum",
                                         by="cluster and namespace"))
        .datasource(ctx.ds)
        .with_target(query(
            ctx, f"goodput:namespace_allocated_idle_gpus:sum{{{ns_rule}}}", f"{{{{{ns}}}}}"))
        .unit("none").height(8).span(12)
    )

    board.with_row(dash.Row("Tokens per joule and cost"))
    by_model = ctx.rule_by_model_f
    board.with_panel(tokens_per_joule(
        ctx, "model", f"goodput:model_tokens_per_joule:ratio_rate5m{{{by_model}}}",
        RULE_SCOPE.format(rule="goodput:model_tokens_per_joule:ratio_rate5m",
                          by="cluster and model") + NO_NAMESPACE))
    board.with_panel(tokens_per_joule(
        ctx, ns, f"goodput:namespace_tokens_per_joule:ratio_rate5m{{{ns_rule}}}",
        RULE_SCOPE.format(rule="goodput:namespace_tokens_per_joule:ratio_rate5m",
                          by="cluster and namespace")))
    board.with_panel(cost(
        ctx, "model", f"goodput:model_cost_per_million_tokens:dollars_rate5m{{{by_model}}}",
        RULE_SCOPE.format(rule="goodput:model_cost_per_million_tokens:dollars_rate5m",
                          by="cluster and model") + NO_NAMESPACE))
    board.with_panel(cost(
        ctx, ns, f"goodput:namespace_cost_per_million_tokens:dollars_rate5m{{{ns_rule}}}",
        RULE_SCOPE.format(rule="goodput:namespace_cost_per_million_tokens:dollars_rate5m",
                          by="cluster and namespace")))
    return board


def tokens_per_joule(ctx: Ctx, by: str, expr: str, scope: str) -> timeseries.Panel:
    return (timeseries.Panel()
            .title(f"Tokens per joule by {by}")
            .description("Tokens produced per joule of GPU energy (sums over the GPUs)." + scope)
            .datasource(ctx.ds)
            .with_target(query(ctx, expr, f"{{{{{by}}}}}"))
            .unit("short").height(8).span(12))


def cost(ctx: Ctx, by: str, expr: str, scope: str) -> timeseries.Panel:
    return (timeseries.Panel()
            .title(f"Cost per million tokens by {by}")
            .description("GPU-hour price (goodput:gpu_hour_price_dollars) of the GPUs serving "
                         "it, per million tokens." + scope)
            .datasource(ctx.ds)
            .with_target(query(ctx, expr, f"{{{{{by}}}}}"))
            .unit("currencyUSD").height(8).span(12))
