"""Fleet efficiency: where the money burns."""

from __future__ import annotations

from grafana_foundation_sdk.builders import bargauge, stat, table, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as model

from mixin.dashboards.common import UIDS, Ctx, base, drilldown_link, query

PRICE = "scalar(goodput:gpu_hour_price_dollars)"


def _stat(ctx: Ctx, title: str, expr: str, unit: str, description: str) -> stat.Panel:
    return (stat.Panel().title(title).description(description).datasource(ctx.ds)
            .with_target(query(ctx, expr, instant=True)).unit(unit).height(4).span(4)
            .graph_mode(cm.BigValueGraphMode.AREA))


def build(ctx: Ctx) -> dash.Dashboard:
    gpu, mdl, gk, ns = ctx.gpu_f, ctx.model_f, ctx.gk, ctx.ns
    board = base(ctx, UIDS["fleet"], "GPU goodput / Fleet efficiency",
                 "Where GPU money burns: hollow utilisation, idle allocations, tokens per joule "
                 "and cost per million tokens, by model and namespace.")
    board.with_row(dash.Row("Fleet"))
    board.with_panel(_stat(ctx, "GPUs", f"count(goodput_gpu_info{{{gpu}}})", "none",
                           "GPUs reported by the exporters in scope."))
    board.with_panel(_stat(
        ctx, "Busy but unproductive GPUs",
        f"count(goodput_gpu_busy_unproductive{{{gpu}}} == 1) or vector(0)", "none",
        "GPUs the exporter marks busy but unproductive (hollow busy or busy with no output)."))
    board.with_panel(_stat(
        ctx, "Kernel time (what nvidia-smi shows)",
        f"sum(goodput:gpu_utilization:ratio_rate5m{{{gpu}}})"
        f" / count(goodput:gpu_utilization:ratio_rate5m{{{gpu}}})", "percentunit",
        "Kernel-time utilisation over every GPU in scope: the figure most dashboards call "
        "utilisation."))
    board.with_panel(_stat(
        ctx, "SM active (real work)",
        f"sum(goodput:gpu_sm_active_seconds:rate5m{{{gpu}}})"
        f" / sum(goodput:gpu_profiled:ratio_rate5m{{{gpu}}})", "percentunit",
        "SM-active time over profiled time, summed over the GPUs in scope."))
    board.with_panel(_stat(ctx, "Tokens/s", f"sum(goodput:gpu_tokens:rate5m{{{mdl}}})", "short",
                           "Prompt + generation tokens per second of the serving engines."))
    board.with_panel(_stat(
        ctx, "Cost per million tokens",
        f"count(goodput:gpu_utilization:ratio_rate5m{{{gpu}}}) * {PRICE} / 3600 * 1e6"
        f" / sum(goodput:gpu_tokens:rate5m{{{gpu}}})",
        "currencyUSD",
        "Every GPU in scope (idle ones included) at the goodput:gpu_hour_price_dollars price, "
        "divided by the tokens they produced."))

    board.with_row(dash.Row("Busy but unproductive"))
    flagged = f"(goodput_gpu_busy_unproductive{{{gpu}}} == 1)"
    with_model = (f"{flagged} * on ({gk}) group_left (model)"
                  f" topk by ({gk}) (1, goodput:gpu_model:info{{{gpu}}})"
                  f" or on ({gk}) {flagged}")
    board.with_panel(
        table.Panel()
        .title("Busy but unproductive GPUs")
        .description("GPUs that look busy by kernel time but do little: with their name, pod, "
                     "the model they serve, why they are flagged and how hollow they are. "
                     "Click a row for the drilldown.")
        .datasource(ctx.ds)
        .with_target(query(
            ctx,
            f"({ctx.q.with_pods(with_model, ['model'])})"
            f" * on ({gk}) group_left (name) goodput_gpu_info{{{gpu}}}",
            ref="A", instant=True, table=True))
        .with_target(query(
            ctx,
            f"goodput:gpu_hollow_utilization:ratio_rate5m{{{gpu}}} and on ({gk}) {flagged}",
            ref="B", instant=True, table=True))
        .with_transformation(model.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(model.DataTransformerConfig(
            id_val="organize",
            options={"excludeByName": {"Time": True, "Value #A": True, "job": True,
                                       "instance": True, "container": True},
                     "renameByName": {"Value #B": "hollow utilisation"}}))
        .data_links([drilldown_link(ctx)])
        .height(8).span(24)
    )

    board.with_row(dash.Row("Regimes and idle allocations"))
    board.with_panel(
        timeseries.Panel()
        .title("Regime mix over time")
        .description("How many GPUs sit in each bottleneck regime.")
        .datasource(ctx.ds)
        .with_target(query(ctx, f"sum by (regime) (goodput_gpu_regime{{{gpu}}})",
                           "{{regime}}"))
        .stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
        .fill_opacity(60).unit("none").height(8).span(12)
    )
    board.with_panel(
        timeseries.Panel()
        .title("Share of GPU time per regime")
        .description("Every window counted, undebounced (goodput_gpu_regime_seconds_total): "
                     "a burst of a few seconds shows here even when the regime state above "
                     "never switched.")
        .datasource(ctx.ds)
        .with_target(query(ctx, f"sum by (regime) (goodput:gpu_regime:ratio_rate5m{{{gpu}}})"
                                f" / scalar(count(goodput_gpu_info{{{gpu}}}))", "{{regime}}"))
        .stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
        .fill_opacity(60).unit("percentunit").height(8).span(12)
    )
    lb = ctx.cfg.labels
    board.with_panel(
        table.Panel()
        .title("Job stragglers")
        .description("The GPU holding each multi-GPU job back: its SM activity leads the "
                     "average of the job's other GPUs (on any node) by the gap shown; they "
                     "wait for it in collectives (GPUJobStraggler).")
        .datasource(ctx.ds)
        .with_target(query(
            ctx, f'goodput:job_straggler:gap_rate5m{{{lb.cluster}=~"$cluster"}}',
            ref="A", instant=True, table=True))
        .with_transformation(model.DataTransformerConfig(
            id_val="organize",
            options={"excludeByName": {"Time": True},
                     "renameByName": {"Value": "SM-active lead over peers"}}))
        .data_links([drilldown_link(ctx)])
        .height(8).span(12)
    )
    idle = f'goodput_gpu_regime{{{gpu}, regime="allocated_idle"}}'
    board.with_panel(
        bargauge.Panel()
        .title("Allocated-idle GPU-hours by namespace")
        .description("GPU-hours in the time range during which a GPU was held but idle.")
        .datasource(ctx.ds)
        .with_target(query(
            ctx,
            f"sum by ({ns}) (\n{ctx.by_namespace(f'avg_over_time({idle}[$__range])')}\n)"
            " * $__range_s / 3600",
            f"{{{{{ns}}}}}", instant=True))
        .unit("h").orientation(cm.VizOrientation.HORIZONTAL).height(8).span(12)
    )
    util = f"goodput:gpu_utilization:ratio_rate5m{{{gpu}}}"
    prof = f"goodput:gpu_profiled:ratio_rate5m{{{gpu}}}"
    sm = f"goodput:gpu_sm_active_seconds:rate5m{{{gpu}}}"
    board.with_panel(
        timeseries.Panel()
        .title("Hollow utilisation by namespace")
        .description("Kernel time with idle SMs over the namespace's profiled GPUs: kernel "
                     "time minus SM-active time, both summed over the GPUs, not averaged.")
        .datasource(ctx.ds)
        .with_target(query(
            ctx,
            "clamp_min(\n"
            f"  sum by ({ns}) ({ctx.by_namespace(f'{util} and on ({gk}) ({prof} > 0)')})\n"
            f"  / count by ({ns}) ({ctx.by_namespace(f'{prof} > 0')})\n"
            f"  - sum by ({ns}) ({ctx.by_namespace(sm)})\n"
            f"  / sum by ({ns}) ({ctx.by_namespace(f'{prof} > 0')}),\n"
            "  0\n)",
            f"{{{{{ns}}}}}"))
        .unit("percentunit").min(0).max(1).height(8).span(12)
    )
    board.with_panel(
        timeseries.Panel()
        .title("Allocated-idle GPUs by namespace")
        .datasource(ctx.ds)
        .with_target(query(ctx, f"sum by ({ns}) ({ctx.by_namespace(idle)})", f"{{{{{ns}}}}}"))
        .unit("none").height(8).span(12)
    )

    board.with_row(dash.Row("Tokens per joule and cost"))
    tokens = f"goodput:gpu_tokens:rate5m{{{mdl}}}"
    gpu_tokens = f"sum by ({gk}) ({tokens})"
    power = f"goodput:gpu_power:watts_rate5m{{{gpu}}}"
    models = f"goodput:gpu_model:info{{{mdl}}}"
    per_model_power = f"{power} * on ({gk}) group_right {models}"
    board.with_panel(tokens_per_joule(
        ctx, "model", f"sum by (model) ({tokens}) / sum by (model) ({per_model_power})"))
    board.with_panel(tokens_per_joule(
        ctx, ns, f"sum by ({ns}) ({ctx.by_namespace(gpu_tokens)})"
        f" / sum by ({ns}) ({ctx.by_namespace(power)})"))
    board.with_panel(cost(
        ctx, "model", f"count by (model) ({models}) * {PRICE} / 3600 * 1e6"
        f" / sum by (model) ({tokens})"))
    board.with_panel(cost(
        ctx, ns, f"count by ({ns}) ({ctx.by_namespace(util)}) * {PRICE} / 3600 * 1e6"
        f" / sum by ({ns}) ({ctx.by_namespace(gpu_tokens)})"))
    return board


def tokens_per_joule(ctx: Ctx, by: str, expr: str) -> timeseries.Panel:
    return (timeseries.Panel()
            .title(f"Tokens per joule by {by}")
            .description("Tokens produced per joule of GPU energy (sums over the GPUs).")
            .datasource(ctx.ds)
            .with_target(query(ctx, expr, f"{{{{{by}}}}}"))
            .unit("short").height(8).span(12))


def cost(ctx: Ctx, by: str, expr: str) -> timeseries.Panel:
    return (timeseries.Panel()
            .title(f"Cost per million tokens by {by}")
            .description("GPU-hour price (goodput:gpu_hour_price_dollars) of the GPUs serving "
                         "it, per million tokens.")
            .datasource(ctx.ds)
            .with_target(query(ctx, expr, f"{{{{{by}}}}}"))
            .unit("currencyUSD").height(8).span(12))
