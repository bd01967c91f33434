"""Serving workload: tokens against SM activity, queue, KV cache, TTFT, MFU."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import table
from grafana_foundation_sdk.models import dashboard as model

from mixin.dashboards.common import UIDS, Ctx, base, query, series

TTFT = ('{__name__=~"vllm:time_to_first_token_seconds_bucket'
        '|sglang:time_to_first_token_seconds_bucket", namespace=~"$namespace", '
        'model_name=~"$model"}')


def build(ctx: Ctx) -> dash.Dashboard:
    GPU, MODEL, NODE, gk = ctx.gpu_f, ctx.model_f, ctx.node_f, ctx.gk
    SERVING_GPUS = f"group by ({gk}) (goodput_gpu_tokens_total{{{MODEL}}})"
    board = base(ctx, UIDS["serving"], "GPU goodput / Serving workload",
                 "Serving engines on their GPUs: tokens against SM activity, queue, KV cache, "
                 "time to first token, model FLOPs utilisation.")
    board.with_row(dash.Row("Throughput"))
    right_axis = [model.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
                  model.DynamicConfigValue(id_val="unit", value="percentunit")]
    board.with_panel(
        series(
            ctx, "Tokens/s per GPU vs SM active", "short",
            (f"sum by ({gk}, model) (rate(goodput_gpu_tokens_total{{{MODEL}}}"
             "[$__rate_interval]))", "gpu {{gpu}} {{model}} tokens/s"),
            (f"rate(goodput_gpu_sm_active_seconds_total{{{GPU}}}[$__rate_interval])"
             f" / (rate(goodput_gpu_profiled_seconds_total{{{GPU}}}[$__rate_interval]) > 0)"
             f" and on ({gk}) {SERVING_GPUS}", "gpu {{gpu}} SM active"),
            description="Tokens per second (left) against SM activity (right): SM activity "
            "without tokens is work that produces nothing.",
        ).override_by_query("B", right_axis).span(24)
    )
    board.with_panel(series(
        ctx, "Tokens per SM-second vs fleet median", "short",
        (f"goodput:gpu_tokens_per_sm_second:ratio_rate5m{{{MODEL}}}", "gpu {{gpu}} {{model}}"),
        ('goodput:model_tokens_per_sm_second:median_rate5m{model=~"$model"}'
         f" and on (model) goodput:gpu_model:info{{{MODEL}}}", "fleet median {{model}}"),
        description="GPULowGoodputVsFleet fires below "
        f"{ctx.cfg.alerts['GPULowGoodputVsFleet'].thresholds['max_share_of_median']:g} "
        "times the median."))
    board.with_panel(series(
        ctx, "Tokens per joule", "short",
        (f"goodput:gpu_tokens_per_joule:ratio_rate5m{{{MODEL}}}", "gpu {{gpu}} {{model}}"),
        (f"goodput_gpu_joules_per_token{{{GPU}}} and on ({gk}) {SERVING_GPUS}",
         "gpu {{gpu}} J/token")))
    board.with_row(dash.Row("Queue and memory"))
    board.with_panel(series(
        ctx, "Queue: running and waiting requests", "none",
        (f"sum by ({gk}, model, state) (goodput_gpu_serving_requests{{{MODEL}}})",
         "gpu {{gpu}} {{model}} {{state}}"),
        description="Requests waiting while the GPU is mostly idle mean a host-bound engine "
        "(GPUHostBound)."))
    board.with_panel(series(
        ctx, "KV cache usage", "percentunit",
        (f"goodput_gpu_kv_cache_usage_ratio{{{MODEL}}}", "gpu {{gpu}} {{model}}")).max(1))
    board.with_row(dash.Row("Latency and model FLOPs"))
    board.with_panel(series(
        ctx, "Time to first token (p50, p90)", "s",
        (f"histogram_quantile(0.5, sum by (le, model_name) (rate({TTFT}[$__rate_interval])))",
         "p50 {{model_name}}"),
        (f"histogram_quantile(0.9, sum by (le, model_name) (rate({TTFT}[$__rate_interval])))",
         "p90 {{model_name}}"),
        description="From the engines' own TTFT histograms (vLLM, SGLang), which Prometheus "
        "scrapes from the engine pods directly; the exporter does not re-export them."))
    board.with_panel(series(
        ctx, "MFU (model FLOPs utilisation)", "percentunit",
        (f"goodput_gpu_mfu_ratio{{{GPU}}} and on ({gk}) {SERVING_GPUS}",
         "gpu {{gpu}}"),
        description="Engine-estimated FLOPs over the GPU's peak, where the engine exports "
        "FLOPs."))
    board.with_panel(
        table.Panel().title("Serving targets").datasource(ctx.ds)
        .description("Every engine endpoint the exporters scrape; 0 = down.")
        .with_target(query(ctx, f"goodput_serving_target_up{{{NODE}}}", instant=True, table=True))
        .with_transformation(model.DataTransformerConfig(
            id_val="organize", options={"excludeByName": {"Time": True, "__name__": True}}))
        .height(8).span(24)
    )
    return board
