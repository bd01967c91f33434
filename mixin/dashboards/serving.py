"""Serving workload: tokens against SM activity, queue, KV cache, TTFT, MFU. One builder per
panel, in rows (ROWS)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import table, timeseries
from grafana_foundation_sdk.models import dashboard as model

from mixin import names as N
from mixin.dashboards.common import (
    NEEDS_ENGINE_SCRAPE,
    NO_ENGINE,
    NO_ENGINE_ON_NODES,
    UIDS,
    Ctx,
    PanelBuilder,
    base,
    query,
    series,
    with_rows,
)

LINE = "{{node}} gpu {{gpu}}"
EVERY_NODE = " The node, GPU and namespace filters do not apply."


def _ttft(ctx: Ctx, q: float) -> str:
    """The q-quantile of time to first token per model, from the engines' histograms as
    goodput.shard.serving records them (a few series per model). Summing by the kept labels
    adds up the parts each shard recorded."""
    lb = ctx.cfg.labels
    sel = f'{ctx.rule_ns_f}, model_name=~"$model"'
    return (f"histogram_quantile({q:g}, sum by ({lb.cluster}, le, model_name) (\n"
            f"  {N.MODEL_TTFT_BUCKET}{{{sel}}}\n))")


def _rate(counter: str, selector: str) -> str:
    return f"rate({counter}{{{selector}}}[$__rate_interval])"


def _tokens_per_series(ctx: Ctx, matchers: str = "") -> str:
    """Each (GPU, model, engine, kind) once, whichever exporter pods report it."""
    selector = ", ".join(m for m in (ctx.model_f, matchers) if m)
    return ctx.one_per_gpu(_rate("goodput_gpu_tokens_total", selector),
                           "model", "engine", "kind")


def _serving_gpus(ctx: Ctx) -> str:
    return f"group by ({ctx.gk}) (goodput_gpu_tokens_total{{{ctx.model_f}}})"


# --- Models (every node) --------------------------------------------------------------

def model_tokens(ctx: Ctx) -> timeseries.Panel:
    return series(
        ctx, "Tokens/s by model", "short",
        (f"sum by (model) ({N.MODEL_TOKENS}{{{ctx.rule_by_model_f}}})", "{{model}}"),
        description="Prompt + generation tokens per second of each model, over every node "
        f"({N.MODEL_TOKENS})." + EVERY_NODE, no_value=NO_ENGINE)


def ttft(ctx: Ctx) -> timeseries.Panel:
    return series(
        ctx, "Time to first token (p50, p90)", "s",
        (_ttft(ctx, 0.5), "p50 {{model_name}}"),
        (_ttft(ctx, 0.9), "p90 {{model_name}}"),
        description="From the engines' own TTFT histograms (vLLM, SGLang), which Prometheus "
        "scrapes from the engine pods directly; the exporter does not re-export them. Per "
        f"model over every engine pod ({N.MODEL_TTFT_BUCKET}, a few series per model whatever "
        "the fleet's size). The node and GPU filters do not apply: engine series carry no "
        "node label.", no_value=NEEDS_ENGINE_SCRAPE)


def model_tokens_per_joule(ctx: Ctx) -> timeseries.Panel:
    return series(
        ctx, "Tokens per joule by model", "short",
        (f"{N.MODEL_TOKENS_PER_JOULE}{{{ctx.rule_by_model_f}}}", "{{model}}"),
        description="Tokens per joule of board energy of the GPUs serving each model, per "
        f"cluster ({N.MODEL_TOKENS_PER_JOULE})." + EVERY_NODE, no_value=NO_ENGINE)


def model_gpus(ctx: Ctx) -> timeseries.Panel:
    return series(
        ctx, "Serving GPUs by model", "none",
        (f"sum by (model) ({N.MODEL_GPUS}{{{ctx.rule_by_model_f}}})", "{{model}}"),
        description="GPUs that produced tokens for each model in the last 5 minutes "
        f"({N.MODEL_GPUS})." + EVERY_NODE, no_value=NO_ENGINE)


# --- Throughput of the selected nodes' GPUs ---------------------------------------------

def tokens_vs_sm(ctx: Ctx) -> timeseries.Panel:
    gk, in_ns, one = ctx.gk, ctx.in_namespaces, ctx.one_per_gpu
    sm = one(_rate("goodput_gpu_sm_active_seconds_total", ctx.gpu_f))
    profiled = one(_rate("goodput_gpu_profiled_seconds_total", ctx.gpu_f))
    right_axis = [model.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
                  model.DynamicConfigValue(id_val="unit", value="percentunit")]
    return series(
        ctx, "Tokens/s per GPU vs SM active", "short",
        (in_ns(f"sum by ({gk}, model) ({_tokens_per_series(ctx)})"),
         LINE + " {{model}} tokens/s"),
        (in_ns(f"{sm} / ({profiled} > 0) and on ({gk}) {_serving_gpus(ctx)}"),
         LINE + " SM active"),
        description="Tokens per second (left) against SM activity (right): SM activity "
        "without tokens is work that produces nothing.", no_value=NO_ENGINE_ON_NODES,
    ).override_by_query("B", right_axis).span(24)


def tokens_per_sm_vs_median(ctx: Ctx) -> timeseries.Panel:
    rmodel, in_ns = ctx.rule_model_f, ctx.in_namespaces
    share = ctx.cfg.alerts["GPULowGoodputVsFleet"].thresholds["max_share_of_median"]
    return series(
        ctx, "Tokens per SM-second vs fleet median", "short",
        (in_ns(f"{N.GPU_TOKENS_PER_SM}{{{rmodel}}}"), LINE + " {{model}}"),
        (f"{N.MODEL_TOKENS_PER_SM_MEDIAN}{{{ctx.rule_by_model_f}}}"
         f" and on (model) {in_ns(f'{N.GPU_MODEL_INFO}{{{rmodel}}}')}",
         "fleet median {{model}}"),
        description="Tokens per SM-active second of each GPU against the fleet median for its "
        "model (all clusters of this Prometheus). GPULowGoodputVsFleet fires below "
        f"{share:g} times the median.", no_value=NO_ENGINE_ON_NODES)


def tokens_per_joule(ctx: Ctx) -> timeseries.Panel:
    # From the selected nodes' raw counters: a per-GPU rule for each would cost every
    # serving GPU two series in Prometheus for one panel (docs/scaling.md).
    gk, in_ns = ctx.gk, ctx.in_namespaces
    watts = ctx.one_per_gpu(_rate("goodput_gpu_energy_joules_total", ctx.gpu_f))
    generated = _tokens_per_series(ctx, 'kind="generation"')
    return series(
        ctx, "Tokens per joule", "short",
        (in_ns(f"sum by ({gk}, model) ({_tokens_per_series(ctx)})\n"
               f"  / on ({gk}) group_left () ({watts} > 0)"), LINE + " {{model}}"),
        (in_ns(f"{watts}\n  / (sum by ({gk}) ({generated}) > 0)"),
         LINE + " J/generated token"),
        description="Tokens (prompt + generation) per joule of board energy per GPU and "
        "model, and board joules per generated token.", no_value=NO_ENGINE_ON_NODES)


# --- Queue, memory, model FLOPs ---------------------------------------------------------

def queue(ctx: Ctx) -> timeseries.Panel:
    requests = ctx.one_per_gpu(f"goodput_gpu_serving_requests{{{ctx.model_f}}}", "model",
                               "engine", "state")
    return series(
        ctx, "Queue: running and waiting requests", "none",
        (ctx.in_namespaces(f"sum by ({ctx.gk}, model, state) ({requests})"),
         LINE + " {{model}} {{state}}"),
        description="Requests waiting while the GPU is mostly idle mean a host-bound engine "
        "(GPUHostBound).", no_value=NO_ENGINE_ON_NODES)


def kv_cache(ctx: Ctx) -> timeseries.Panel:
    usage = ctx.one_per_gpu(f"goodput_gpu_kv_cache_usage_ratio{{{ctx.model_f}}}", "model",
                            "engine")
    return series(
        ctx, "KV cache usage", "percentunit",
        (ctx.in_namespaces(usage), LINE + " {{model}}"),
        description="Share of the engine's KV-cache blocks in use; near 1 the engine "
                    "preempts or queues requests.",
        no_value=NO_ENGINE_ON_NODES + " Engines that report no KV-cache usage leave it "
        "empty too.").max(1)


def mfu(ctx: Ctx) -> timeseries.Panel:
    ratio = ctx.one_per_gpu(f"goodput_gpu_mfu_ratio{{{ctx.gpu_f}}}")
    return series(
        ctx, "MFU (model FLOPs utilisation)", "percentunit",
        (ctx.in_namespaces(f"{ratio} and on ({ctx.gk}) {_serving_gpus(ctx)}"), LINE),
        description="Engine-estimated FLOPs over the GPU's peak, where the engine exports "
        "FLOPs (vLLM, SGLang) or the model's parameter count is configured "
        "(model.model_parameters).",
        no_value=NO_ENGINE_ON_NODES + " With engines: they export no FLOPs estimate and no "
        "model parameter count is configured.")


def serving_targets(ctx: Ctx) -> table.Panel:
    return (
        table.Panel().title("Serving targets").datasource(ctx.ds)
        .description("Every engine endpoint the exporters scrape; 0 = down. A target belongs "
                     "to a node, not a GPU or pod: the GPU and namespace filters do not apply.")
        .with_target(query(
            ctx, f'goodput_serving_target_up{{{ctx.node_f}, model=~"$model"}}', instant=True,
            table=True))
        .with_transformation(model.DataTransformerConfig(
            id_val="organize", options={"excludeByName": {"Time": True, "__name__": True}}))
        .unit("none")
        .no_value("No serving target: set serving.targets or serving.discovery in the chart.")
        .height(8).span(24))


ROWS: list[tuple[str, list[PanelBuilder]]] = [
    ("Models (every node)", [model_tokens, ttft, model_tokens_per_joule, model_gpus]),
    ("Throughput of the selected nodes' GPUs", [tokens_vs_sm, tokens_per_sm_vs_median,
                                                tokens_per_joule]),
    ("Queue and memory of the selected nodes' GPUs", [queue, kv_cache]),
    ("Model FLOPs of the selected nodes' GPUs", [mfu, serving_targets]),
]


def build(ctx: Ctx) -> dash.Dashboard:
    board = base(ctx, UIDS["serving"], "GPU goodput / Serving workload",
                 "Serving engines: per model across the fleet, then per GPU of the selected "
                 "nodes: tokens against SM activity, queue, KV cache, time to first token, "
                 "model FLOPs utilisation.", node_from="goodput_gpu_info")
    return with_rows(ctx, board, ROWS)
