"""Serving workload: tokens against SM activity, queue, KV cache, TTFT, MFU."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import table
from grafana_foundation_sdk.models import dashboard as model

from mixin.dashboards.common import (
    NEEDS_ENGINE_SCRAPE,
    UIDS,
    Ctx,
    base,
    query,
    series,
)


def _ttft(ctx: Ctx, q: float) -> str:
    """The q-quantile of time to first token per model, from the engines' histograms as
    goodput.shard.serving records them (a few series per model). Summing by the kept labels
    adds up the parts each shard recorded."""
    lb = ctx.cfg.labels
    sel = f'{ctx.rule_ns_f}, model_name=~"$model"'
    return (f"histogram_quantile({q:g}, sum by ({lb.cluster}, le, model_name) (\n"
            f"  goodput:model_ttft_seconds_bucket:rate5m{{{sel}}}\n))")


def build(ctx: Ctx) -> dash.Dashboard:
    GPU, MODEL, NODE, gk = ctx.gpu_f, ctx.model_f, ctx.node_f, ctx.gk
    one_per_gpu = ctx.one_per_gpu

    def rate(counter: str, selector: str) -> str:
        return f"rate({counter}{{{selector}}}[$__rate_interval])"

    in_ns = ctx.in_namespaces
    SERVING_GPUS = f"group by ({gk}) (goodput_gpu_tokens_total{{{MODEL}}})"
    board = base(ctx, UIDS["serving"], "GPU goodput / Serving workload",
                 "Serving engines: per model across the fleet, then per GPU of the selected "
                 "nodes: tokens against SM activity, queue, KV cache, time to first token, "
                 "model FLOPs utilisation.", node_from="goodput_gpu_tokens_total")
    by_model = ctx.rule_by_model_f
    board.with_row(dash.Row("Models (every node)"))
    board.with_panel(series(
        ctx, "Tokens/s by model", "short",
        (f"sum by (model) (goodput:model_tokens:rate5m{{{by_model}}})", "{{model}}"),
        description="Prompt + generation tokens per second of each model, over every node "
        "(goodput:model_tokens:rate5m). The node, GPU and namespace filters do not apply."))
    board.with_panel(series(
        ctx, "Time to first token (p50, p90)", "s",
        (_ttft(ctx, 0.5), "p50 {{model_name}}"),
        (_ttft(ctx, 0.9), "p90 {{model_name}}"),
        description="From the engines' own TTFT histograms (vLLM, SGLang), which Prometheus "
        "scrapes from the engine pods directly; the exporter does not re-export them. Per "
        "model over every engine pod (goodput:model_ttft_seconds_bucket:rate5m, a few series "
        "per model whatever the fleet's size). The node and GPU filters do not apply: engine "
        "series carry no node label.", no_value=NEEDS_ENGINE_SCRAPE))
    board.with_panel(series(
        ctx, "Tokens per joule by model", "short",
        (f"goodput:model_tokens_per_joule:ratio_rate5m{{{by_model}}}", "{{model}}"),
        description="Tokens per joule of board energy of the GPUs serving each model, per "
        "cluster (goodput:model_tokens_per_joule:ratio_rate5m). The node, GPU and namespace "
        "filters do not apply."))
    board.with_panel(series(
        ctx, "Serving GPUs by model", "none",
        (f"sum by (model) (goodput:model_gpus:count{{{by_model}}})", "{{model}}"),
        description="GPUs that produced tokens for each model in the last 5 minutes "
        "(goodput:model_gpus:count). The node, GPU and namespace filters do not apply."))
    board.with_row(dash.Row("Throughput of the selected nodes' GPUs"))
    # Each (GPU, model, engine, kind) once, whichever exporter pods report it, then summed.
    tokens_per_series = one_per_gpu(rate("goodput_gpu_tokens_total", MODEL),
                                    "model", "engine", "kind")
    requests = one_per_gpu(f"goodput_gpu_serving_requests{{{MODEL}}}", "model", "engine",
                           "state")
    right_axis = [model.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
                  model.DynamicConfigValue(id_val="unit", value="percentunit")]
    board.with_panel(
        series(
            ctx, "Tokens/s per GPU vs SM active", "short",
            (in_ns(f"sum by ({gk}, model) ({tokens_per_series})"),
             "{{node}} gpu {{gpu}} {{model}} tokens/s"),
            (in_ns(f"{one_per_gpu(rate('goodput_gpu_sm_active_seconds_total', GPU))}"
                   f" / ({one_per_gpu(rate('goodput_gpu_profiled_seconds_total', GPU))}"
                   f" > 0) and on ({gk}) {SERVING_GPUS}"), "{{node}} gpu {{gpu}} SM active"),
            description="Tokens per second (left) against SM activity (right): SM activity "
            "without tokens is work that produces nothing.",
        ).override_by_query("B", right_axis).span(24)
    )
    rmodel = ctx.rule_model_f
    board.with_panel(series(
        ctx, "Tokens per SM-second vs fleet median", "short",
        (in_ns(f"goodput:gpu_tokens_per_sm_second:ratio_rate5m{{{rmodel}}}"),
         "{{node}} gpu {{gpu}} {{model}}"),
        (f"goodput:model_tokens_per_sm_second:median_rate5m{{{ctx.rule_by_model_f}}}"
         f" and on (model) {in_ns(f'goodput:gpu_model:info{{{rmodel}}}')}",
         "fleet median {{model}}"),
        description="Tokens per SM-active second of each GPU against the fleet median for its "
        "model (all clusters of this Prometheus). GPULowGoodputVsFleet fires below "
        f"{ctx.cfg.alerts['GPULowGoodputVsFleet'].thresholds['max_share_of_median']:g} "
        "times the median."))
    # From the selected nodes' raw counters: a per-GPU rule for each would cost every
    # serving GPU two series in Prometheus for one panel (docs/scaling.md).
    watts = one_per_gpu(rate("goodput_gpu_energy_joules_total", GPU))
    generated = one_per_gpu(rate("goodput_gpu_tokens_total", f'{MODEL}, kind="generation"'),
                            "model", "engine", "kind")
    board.with_panel(series(
        ctx, "Tokens per joule", "short",
        (in_ns(f"sum by ({gk}, model) ({tokens_per_series})\n"
               f"  / on ({gk}) group_left () ({watts} > 0)"),
         "{{node}} gpu {{gpu}} {{model}}"),
        (in_ns(f"{watts}\n  / (sum by ({gk}) ({generated}) > 0)"),
         "{{node}} gpu {{gpu}} J/generated token"),
        description="Tokens (prompt + generation) per joule of board energy per GPU and "
        "model, and board joules per generated token."))
    board.with_row(dash.Row("Queue and memory of the selected nodes' GPUs"))
    board.with_panel(series(
        ctx, "Queue: running and waiting requests", "none",
        (in_ns(f"sum by ({gk}, model, state) ({requests})"),
         "{{node}} gpu {{gpu}} {{model}} {{state}}"),
        description="Requests waiting while the GPU is mostly idle mean a host-bound engine "
        "(GPUHostBound)."))
    board.with_panel(series(
        ctx, "KV cache usage", "percentunit",
        (in_ns(one_per_gpu(f"goodput_gpu_kv_cache_usage_ratio{{{MODEL}}}", "model", "engine")),
         "{{node}} gpu {{gpu}} {{model}}"),
        description="Share of the engine's KV-cache blocks in use; near 1 the engine "
                    "preempts or queues requests.").max(1))
    board.with_row(dash.Row("Model FLOPs of the selected nodes' GPUs"))
    board.with_panel(series(
        ctx, "MFU (model FLOPs utilisation)", "percentunit",
        (in_ns(f"{one_per_gpu(f'goodput_gpu_mfu_ratio{{{GPU}}}')} and on ({gk}) {SERVING_GPUS}"),
         "{{node}} gpu {{gpu}}"),
        description="Engine-estimated FLOPs over the GPU's peak, where the engine exports "
        "FLOPs (vLLM, SGLang) or the model's parameter count is configured "
        "(model.model_parameters).",
        no_value="No data: the engines export no FLOPs estimate and no model parameter count "
        "is configured."))
    board.with_panel(
        table.Panel().title("Serving targets").datasource(ctx.ds)
        .description("Every engine endpoint the exporters scrape; 0 = down. A target belongs "
                     "to a node, not a GPU or pod: the GPU and namespace filters do not apply.")
        .with_target(query(
            ctx, f'goodput_serving_target_up{{{NODE}, model=~"$model"}}', instant=True,
            table=True))
        .with_transformation(model.DataTransformerConfig(
            id_val="organize", options={"excludeByName": {"Time": True, "__name__": True}}))
        .unit("none")
        .no_value("No serving target: set serving.targets or serving.discovery in the chart.")
        .height(8).span(24)
    )
    return board
