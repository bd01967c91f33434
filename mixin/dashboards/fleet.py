"""Fleet efficiency: where the money burns. One builder per panel, in rows (ROWS)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import barchart, bargauge, stat, table, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as model

from mixin import names as N
from mixin.config import seconds
from mixin.dashboards.common import (
    NO_ENGINE,
    NO_JOBS,
    NO_KUBERNETES,
    NO_PROFILING,
    UIDS,
    Ctx,
    PanelBuilder,
    base,
    drilldown_link,
    query,
    with_rows,
)

PRICE = f"scalar({N.PRICE})"


def _stat(ctx: Ctx, title: str, expr: str, unit: str, description: str) -> stat.Panel:
    return (stat.Panel().title(title).description(description).datasource(ctx.ds)
            .with_target(query(ctx, expr, instant=True)).unit(unit).height(4).span(4)
            .graph_mode(cm.BigValueGraphMode.AREA))


RULE_SCOPE = (" Read from the recording rule {rule}, which is per {by}: the node and GPU "
              "filters do not apply.")
NO_NAMESPACE = " The namespace filter does not apply either."


def _legend(label: str) -> str:
    """A legend showing one label's value."""
    return "{{" + label + "}}"


def _per_gpu(ctx: Ctx, rule: str) -> str:
    """A per-GPU rule of the GPUs in scope, one series per GPU whatever the scrape targets (a
    replaced exporter pod overlaps its successor for a rate window)."""
    return ctx.in_namespaces(f"max by ({ctx.gk}) ({rule}{{{ctx.rule_gpu_f}}})")


# --- Fleet ------------------------------------------------------------------------------

def gpus(ctx: Ctx) -> stat.Panel:
    every = ctx.in_namespaces(f"group by ({ctx.gk}) (goodput_gpu_info{{{ctx.gpu_f}}})")
    return _stat(ctx, "GPUs", f"count({every})", "none",
                 "GPUs reported by the exporters in scope (cluster, node, GPU and namespace "
                 "filters).")


def busy_unproductive_count(ctx: Ctx) -> stat.Panel:
    flagged = ctx.in_namespaces(
        f"group by ({ctx.gk}) (goodput_gpu_busy_unproductive{{{ctx.gpu_f}}} == 1)")
    return _stat(ctx, "Busy but unproductive GPUs", f"count({flagged}) or vector(0)", "none",
                 "GPUs the exporter marks busy but unproductive (hollow busy, busy with no "
                 "output or both: each GPU counts once).")


def kernel_time(ctx: Ctx) -> stat.Panel:
    util = _per_gpu(ctx, N.GPU_UTILIZATION)
    return _stat(ctx, "Kernel time (what nvidia-smi shows)", f"sum({util}) / count({util})",
                 "percentunit", "Kernel-time utilisation over every GPU in scope: the figure "
                 "most dashboards call utilisation.")


def sm_active(ctx: Ctx) -> stat.Panel:
    sm, prof = _per_gpu(ctx, N.GPU_SM_ACTIVE), _per_gpu(ctx, N.GPU_PROFILED)
    return _stat(ctx, "SM active (real work)", f"sum({sm}) / sum({prof})", "percentunit",
                 "SM-active time over profiled time, summed over the GPUs in scope."
                 ).no_value(NO_PROFILING)


def tokens(ctx: Ctx) -> stat.Panel:
    per_model = ctx.in_namespaces(f"{N.GPU_TOKENS}{{{ctx.rule_model_f}}}")
    return _stat(ctx, "Tokens/s", f"sum({per_model})", "short",
                 "Prompt + generation tokens per second of the serving engines."
                 ).no_value(NO_ENGINE)


def cost_per_million(ctx: Ctx) -> stat.Panel:
    util = _per_gpu(ctx, N.GPU_UTILIZATION)
    produced = ctx.in_namespaces(f"{N.GPU_TOKENS}{{{ctx.rule_gpu_f}}}")
    return _stat(ctx, "Cost per million tokens",
                 f"count({util}) * {PRICE} / 3600 * 1e6 / sum({produced})", "currencyUSD",
                 f"Every GPU in scope (idle ones included) at the {N.PRICE} price, divided by "
                 "the tokens they produced.").no_value(NO_ENGINE)


# --- Busy but unproductive --------------------------------------------------------------

def _flagged_with_model(ctx: Ctx, flagged: str) -> str:
    """Flagged GPUs with the model they serve, where they serve one. One series per GPU on
    the "one" side of every join: a GPU flagged for both reasons, or reported by an old and a
    new exporter pod, must not break the group_left/right joins."""
    gk, one_per_gpu = ctx.gk, f"max by ({ctx.gk}) {flagged}"
    return (f"{one_per_gpu} * on ({gk}) group_left (model)"
            f" topk by ({gk}) (1, {N.GPU_MODEL_INFO}{{{ctx.rule_gpu_f}}})"
            f" or on ({gk}) {one_per_gpu}")


def busy_unproductive_table(ctx: Ctx) -> table.Panel:
    gk, in_ns = ctx.gk, ctx.in_namespaces
    flagged = f"(goodput_gpu_busy_unproductive{{{ctx.gpu_f}}} == 1)"
    named = (f"({ctx.q.with_pods(in_ns(_flagged_with_model(ctx, flagged)), ['model'])})"
             f" * on ({gk}) group_left (name) group by ({gk}, name) "
             f"(goodput_gpu_info{{{ctx.gpu_f}}})")
    hollow = (f"max by ({gk}) ({N.GPU_HOLLOW}{{{ctx.rule_gpu_f}}})"
              f" and on ({gk}) {in_ns(flagged)}")
    hidden = {"Time": True, "Value #A": True, "Value #C": True, "job": True,
              "instance": True, "container": True}
    return (
        table.Panel().title("Busy but unproductive GPUs")
        .description("GPUs that look busy by kernel time but do little: with their name, pod, "
                     "the model they serve, why they are flagged (a row per reason) and how "
                     "hollow they are. Click a row for the drilldown.")
        .datasource(ctx.ds)
        .with_target(query(ctx, named, ref="A", instant=True, table=True))
        .with_target(query(ctx, hollow, ref="B", instant=True, table=True))
        .with_target(query(ctx, f"group by ({gk}, reason) {in_ns(flagged)}", ref="C",
                           instant=True, table=True))
        .with_transformation(model.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(model.DataTransformerConfig(
            id_val="organize", options={"excludeByName": hidden,
                                        "renameByName": {"Value #B": "hollow utilisation"}}))
        .data_links([drilldown_link(ctx)])
        .unit("percentunit").no_value("No GPU is busy but unproductive.")
        .height(8).span(24))


def shared_holders(ctx: Ctx) -> timeseries.Panel:
    top = f"topk(20, {N.GPU_HOLDER_KERNEL}{{{ctx.rule_gpu_f}, {ctx.ns_f}}})"
    return (timeseries.Panel().title("Shared GPUs: what each holder runs (top 20)")
            .description("Holders of GPUs that several pods or processes share (time-slicing "
                         "or MPS), stacked: each one's share of its GPU's kernel time "
                         f"({N.GPU_HOLDER_KERNEL}), the 20 largest in scope. The node "
                         "dashboard shows one GPU's holders with their SM activity.")
            .datasource(ctx.ds)
            .with_target(query(ctx, top, "{{node}} gpu {{gpu}} {{namespace}}/{{pod}} {{pid}}"))
            .stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
            .fill_opacity(60).unit("percentunit")
            .no_value("No shared GPU in scope (holders need two or more pods or processes on "
                      "one GPU).")
            .height(8).span(12))


def unproductive_holders(ctx: Ctx) -> table.Panel:
    flagged = f"{N.GPU_HOLDER_UNPRODUCTIVE}{{{ctx.rule_gpu_f}, {ctx.ns_f}}} == 1"
    hidden = {"Time": True, "Value": True, "job": True, "instance": True}
    return (table.Panel().title("Busy but unproductive holders of shared GPUs")
            .description("Pods (or processes) on a shared GPU whose own share is hollow or "
                         "makes no tokens (GPUHolderBusyButUnproductive): the pod to move "
                         "or resize, not its neighbours.")
            .datasource(ctx.ds)
            .with_target(query(ctx, flagged, ref="A", instant=True, table=True))
            .with_transformation(model.DataTransformerConfig(
                id_val="organize", options={"excludeByName": hidden}))
            .data_links([drilldown_link(ctx)])
            .unit("none").no_value("No holder of a shared GPU is busy but unproductive.")
            .height(8).span(12))


# --- Regimes and idle allocations -------------------------------------------------------

def _regime_panel(ctx: Ctx, title: str, description: str, expr: str,
                  unit: str) -> timeseries.Panel:
    scope = RULE_SCOPE.format(rule=N.CLUSTER_REGIME_GPUS, by="cluster and regime")
    return (timeseries.Panel().title(title).description(description + scope + NO_NAMESPACE)
            .datasource(ctx.ds).with_target(query(ctx, expr, "{{regime}}"))
            .stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
            .fill_opacity(60).unit(unit).height(8).span(12))


def regime_mix(ctx: Ctx) -> timeseries.Panel:
    return _regime_panel(
        ctx, "Regime mix over time",
        "How many GPUs sit in each bottleneck regime (the exporter's debounced state).",
        f"sum by (regime) ({N.CLUSTER_REGIME_GPUS}{{{ctx.rule_cluster_f}}})", "none")


def regime_share(ctx: Ctx) -> timeseries.Panel:
    # Per cluster, not per GPU: joining every GPU to its pods at every step cost 5 s at
    # 1,000 GPUs (docs/benchmarks.md, fleet scale).
    regime = f"{N.CLUSTER_REGIME_GPUS}{{{ctx.rule_cluster_f}}}"
    return _regime_panel(
        ctx, "Share of GPU time per regime",
        "Every window counted, undebounced (goodput_gpu_regime_seconds_total): a burst of a "
        "few seconds shows here even when the regime state above never switched.",
        f"sum by (regime) ({regime}) / scalar(sum({regime}))", "percentunit")


def _job_filter(ctx: Ctx) -> str:
    """Job series of the clusters and namespaces in scope (jobs outside Kubernetes have no
    namespace: they stay in scope while every namespace is selected)."""
    return f"{ctx.rule_cluster_f}, {ctx.ns_f}"


def job_stragglers(ctx: Ctx) -> table.Panel:
    gap = f"{N.JOB_STRAGGLER}{{{ctx.rule_gpu_f}, {ctx.ns_f}}}"
    waiting = f"{N.JOB_WAITING_GPUS}{{{_job_filter(ctx)}}}"
    threshold = ctx.cfg.alerts["GPUJobStraggler"].thresholds["min_waiting_gap"]
    steps = {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                           {"color": "red", "value": threshold}]}
    lead = "Waits less than its peers"
    job = ", ".join([ctx.cfg.labels.cluster, *ctx.q.job_labels])
    return (
        table.Panel().title("Job stragglers")
        .description(
            "The least-waiting GPU of every multi-GPU job in scope (on any node, whatever the "
            "job's source, job_source) when it waits at "
            "most half as much as the job's most-waiting GPU, and any GPU its node's model "
            "names a straggler: how much less of its time it waited on peers than that GPU "
            "(goodput_gpu_job_seconds_total{part=\"waiting\"}), and the GPUs the job loses "
            f"waiting. A gap of {threshold:g} or more (red) is a straggler (GPUJobStraggler). "
            "A job whose ranks all wait alike (a rotating imbalance) has no row here: see "
            "the time split. Jobs outside Kubernetes have no namespace: they show while every "
            "namespace is selected.")
        .datasource(ctx.ds)
        .with_target(query(ctx, gap, ref="A", instant=True, table=True))
        .with_target(query(ctx, f"{gap} * 0 + on ({job}) group_left () {waiting}",
                           ref="B", instant=True, table=True))
        .with_transformation(model.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(model.DataTransformerConfig(
            id_val="organize", options={"excludeByName": {"Time": True},
                                        "renameByName": {"Value #A": lead,
                                                         "Value #B": "GPUs lost waiting"}}))
        .override_by_name(lead, [
            model.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-text"}),
            model.DynamicConfigValue(id_val="thresholds", value=steps)])
        .override_by_name("GPUs lost waiting", [
            model.DynamicConfigValue(id_val="unit", value="none")])
        .data_links([drilldown_link(ctx)])
        .unit("percentunit").no_value(NO_JOBS)
        .height(8).span(12))


# The parts of a job's GPU time, in the order they stack (goodput_gpu_job_seconds_total).
JOB_PARTS = ("working", "transferring", "waiting", "host_stalled", "idle")


def job_time_split(ctx: Ctx) -> barchart.Panel:
    """One stacked bar per job: its GPU-seconds over the range by part, as shares. From the
    per-job rule, like the waiting hours beside it."""
    split = f"{N.JOB_GPU_SECONDS}{{{_job_filter(ctx)}}}"
    keys = ", ".join(ctx.q.job_labels)
    # One bar per job key (two namespaces may each run a job "train"): its labels joined.
    joined = ", ".join(f'"{label}"' for label in ctx.q.job_labels)
    grouped = {"rowField": "job_key", "columnField": "part", "valueField": "Value",
               "emptyValue": "zero"}
    return (
        barchart.Panel().title("Time split of each job")
        .description(
            "Where each multi-GPU job's GPU time went over the time range, as shares of its "
            "GPU-seconds: working (its own kernels); transferring (the links: NVLink bytes "
            "its collectives need, PCIe copies to and from the host); waiting (on a peer GPU: "
            "a straggler, imbalance, pipeline bubbles); host_stalled (no kernel queued while "
            "the job holds the GPU: storage, the input pipeline, checkpointing, a serving "
            "engine without requests); idle (no process). The parts add up to the job's "
            "GPU-seconds (the node models' "
            f"goodput_gpu_job_seconds_total, summed over every node by the rule "
            f"{N.JOB_GPU_SECONDS}, which is per job: the node and GPU filters do not apply). "
            "Jobs outside Kubernetes have no namespace: they show while every namespace is "
            "selected.")
        .datasource(ctx.ds)
        .with_target(query(
            ctx, f'label_join(sum by ({keys}, part) (avg_over_time({split}[$__range])), '
            f'"job_key", " ", {joined})', instant=True, table=True))
        .with_transformation(model.DataTransformerConfig(id_val="groupingToMatrix",
                                                         options=grouped))
        # groupingToMatrix names its first column "<rowField>\\<columnField>".
        .with_transformation(model.DataTransformerConfig(
            id_val="organize", options={
                "indexByName": {"job_key\\part": 0,
                                **{part: i + 1 for i, part in enumerate(JOB_PARTS)}},
                "renameByName": {"job_key\\part": "job"}}))
        .orientation(cm.VizOrientation.HORIZONTAL)
        .stacking(cm.StackingMode.PERCENT)
        .x_field("job")
        .unit("percentunit").no_value(NO_JOBS)
        .height(8).span(12))


def _per_job_bars(ctx: Ctx, title: str, description: str, expr: str) -> bargauge.Panel:
    """A horizontal bar per multi-GPU job, from an instant ``expr`` over the time range that
    keeps the job labels: the per-job panels differ only in what they sum and its unit."""
    lb = ctx.cfg.labels
    return (
        bargauge.Panel().title(title).description(description)
        .datasource(ctx.ds)
        .with_target(query(
            ctx, expr, "{{" + lb.job_source + "}} {{" + lb.namespace + "}} {{" + lb.job_id
            + "}}", instant=True))
        .orientation(cm.VizOrientation.HORIZONTAL)
        .no_value(NO_JOBS)
        .height(8).span(12))


def job_wait_hours(ctx: Ctx) -> bargauge.Panel:
    """From the per-job rule, one sample per rule evaluation, like the allocated-idle hours:
    reading every GPU's wait counter over the range would cost a series per GPU."""
    step = ctx.cfg.rule_interval or "1m"
    waiting = f"{N.JOB_WAITING_GPUS}{{{_job_filter(ctx)}}}"
    keys = ", ".join(ctx.q.job_labels)
    return _per_job_bars(
        ctx, "GPU-hours lost waiting, by job",
        "GPU-hours in the time range the GPUs of each multi-GPU job spent waiting on the "
        "job's other GPUs (in collectives or for a peer's data) instead of working: the "
        "exporters' estimate (goodput_gpu_job_wait_seconds_total), summed over the job's "
        f"GPUs on every node through the recording rule {N.JOB_WAITING_GPUS}, which is per "
        "job: the node and GPU filters do not apply. Jobs outside Kubernetes have no "
        "namespace: they show while every namespace is selected.",
        f"sum by ({keys}) (sum_over_time({waiting}[$__range])) * {seconds(step):g} / 3600",
    ).unit("h")


def job_waiting_share(ctx: Ctx) -> bargauge.Panel:
    """The figure GPUJobLosingToWaiting watches, per job, from its recording rule: the share
    a runbook reader compares with the alert's threshold."""
    share = f"{N.JOB_WAITING}{{{_job_filter(ctx)}}}"
    keys = ", ".join(ctx.q.job_labels)
    threshold = ctx.cfg.alerts["GPUJobLosingToWaiting"].thresholds["min_waiting_share"]
    return _per_job_bars(
        ctx, "Share of GPU time lost waiting, by job",
        "Of each multi-GPU job's GPU-seconds, the share its GPUs spent waiting on the "
        "job's other GPUs (a straggler, a rotating imbalance, a pipeline bubble, a peer's "
        "host stall), averaged over the time range from the recording rule "
        f"{N.JOB_WAITING}; GPUJobLosingToWaiting fires on a job at {threshold:g} for its "
        "whole delay. Per job: the node and GPU filters do not apply.",
        f"avg by ({keys}) (avg_over_time({share}[$__range]))",
    ).unit("percentunit").min(0).max(1)


def job_tokens_per_working(ctx: Ctx) -> bargauge.Panel:
    """A serving engine spanning GPUs is a job like a training one: its tokens per GPU-second
    of its GPUs' working part, from the per-job rule."""
    per = f"{N.JOB_TOKENS_PER_WORKING}{{{_job_filter(ctx)}}}"
    keys = ", ".join(ctx.q.job_labels)
    return _per_job_bars(
        ctx, "Tokens per GPU-second working, by serving job",
        "Generated tokens per second of the engines on each multi-GPU job's GPUs (an "
        "engine split over GPUs by tensor or layer, in one process or several), divided "
        "by the GPU-seconds per second those GPUs spent working: what the engine makes of "
        "the GPU time it does not lose waiting on its other GPUs, on the links or on its "
        "host (the time split beside). Averaged over the time range from the recording "
        f"rule {N.JOB_TOKENS_PER_WORKING}, which is per job: the node and GPU filters do "
        "not apply. Jobs outside Kubernetes have no namespace: they show while every "
        "namespace is selected.",
        f"avg by ({keys}) (avg_over_time({per}[$__range]))",
    ).unit("none").no_value("No multi-GPU job served tokens in the range: a serving engine "
                            "on two or more GPUs (or a pod holding several) shows here.")


def allocated_idle_hours(ctx: Ctx) -> bargauge.Panel:
    # The namespace rule, one sample per rule evaluation: a per-GPU join per minute of the
    # range cost 2 s over 24 h at 1,000 GPUs (docs/benchmarks.md, fleet scale).
    step, ns = ctx.cfg.rule_interval or "1m", ctx.ns
    idle = f'{N.NAMESPACE_ALLOCATED_IDLE}{{{ctx.rule_ns_f}, {ctx.cfg.labels.node}=~"$node"}}'
    expr = f"sum by ({ns}) (sum_over_time({idle}[$__range])) * {seconds(step):g} / 3600"
    return (
        bargauge.Panel().title("Allocated-idle GPU-hours by namespace")
        .description("GPU-hours in the time range during which a GPU was held by a pod of the "
                     "namespace but idle: the exact time (goodput_gpu_regime_seconds_total, "
                     f"through {N.GPU_REGIME}), each rule evaluation attributed to the "
                     "namespace holding the GPU then. Read from the recording rule "
                     f"{N.NAMESPACE_ALLOCATED_IDLE}, which is per node and namespace: the GPU "
                     "filter does not apply.")
        .datasource(ctx.ds)
        .with_target(query(ctx, expr, _legend(ns), instant=True))
        .unit("h").orientation(cm.VizOrientation.HORIZONTAL)
        .no_value("No GPU was held by a pod and idle in the range, or no Kubernetes pod "
                  "attribution (goodput_gpu_pod_info): bare-metal and Slurm nodes have no "
                  "namespaces.")
        .height(8).span(12))


def _by_namespace(ctx: Ctx, title: str, rule: str, description: str, unit: str,
                  no_value: str) -> timeseries.Panel:
    scope = RULE_SCOPE.format(rule=rule, by="cluster and namespace")
    return (timeseries.Panel().title(title).description(description + scope)
            .datasource(ctx.ds)
            .with_target(query(ctx, f"{rule}{{{ctx.rule_ns_f}}}", _legend(ctx.ns)))
            .unit(unit).no_value(no_value))


def hollow_by_namespace(ctx: Ctx) -> timeseries.Panel:
    return _by_namespace(
        ctx, "Hollow utilisation by namespace", N.NAMESPACE_HOLLOW,
        "Kernel time with idle SMs over the namespace's profiled GPUs: kernel time minus "
        "SM-active time, both summed over the GPUs, not averaged.",
        "percentunit", NO_KUBERNETES + " It also needs a profiling source (GPM or DCGM)."
        ).min(0).max(1).height(8).span(12)


def allocated_idle_by_namespace(ctx: Ctx) -> timeseries.Panel:
    return _by_namespace(
        ctx, "Allocated-idle GPUs by namespace", N.NAMESPACE_ALLOCATED_IDLE,
        "GPUs a pod of the namespace holds while they sit idle (the exporter's allocated_idle "
        "regime).", "none",
        "No GPU held idle by a pod, or no Kubernetes pod attribution (goodput_gpu_pod_info): "
        "bare-metal and Slurm nodes have no namespaces.").height(8).span(12)


# --- Tokens per joule and cost ----------------------------------------------------------

def _rule_panel(ctx: Ctx, title: str, description: str, unit: str, rule: str,
                by: str) -> timeseries.Panel:
    """A per-model or per-namespace rule (``by``), with the filters that apply to it."""
    per_model = by == "model"
    flt = ctx.rule_by_model_f if per_model else ctx.rule_ns_f
    scope = RULE_SCOPE.format(rule=rule, by=f"cluster and {'model' if per_model else 'namespace'}")
    no_value = NO_ENGINE + ("" if per_model else " Per namespace it also needs Kubernetes pod "
                            "attribution (goodput_gpu_pod_info).")
    return (timeseries.Panel().title(title)
            .description(description + scope + (NO_NAMESPACE if per_model else ""))
            .datasource(ctx.ds)
            .with_target(query(ctx, f"{rule}{{{flt}}}", _legend(by)))
            .unit(unit).height(8).span(12).no_value(no_value))


def tokens_per_joule(ctx: Ctx, by: str, rule: str) -> timeseries.Panel:
    return _rule_panel(ctx, f"Tokens per joule by {by}",
                       "Tokens produced per joule of GPU energy (sums over the GPUs).",
                       "short", rule, by)


def cost(ctx: Ctx, by: str, rule: str) -> timeseries.Panel:
    return _rule_panel(ctx, f"Cost per million tokens by {by}",
                       f"GPU-hour price ({N.PRICE}) of the GPUs serving it, per million "
                       "tokens.", "currencyUSD", rule, by)


ROWS: list[tuple[str, list[PanelBuilder]]] = [
    ("Fleet", [gpus, busy_unproductive_count, kernel_time, sm_active, tokens,
               cost_per_million]),
    ("Busy but unproductive", [busy_unproductive_table]),
    ("Shared GPUs", [shared_holders, unproductive_holders]),
    ("Regimes and idle allocations", [regime_mix, regime_share, allocated_idle_hours,
                                      hollow_by_namespace, allocated_idle_by_namespace]),
    ("Multi-GPU jobs", [job_stragglers, job_wait_hours, job_waiting_share, job_time_split,
                        job_tokens_per_working]),
    ("Tokens per joule and cost", [
        lambda ctx: tokens_per_joule(ctx, "model", N.MODEL_TOKENS_PER_JOULE),
        lambda ctx: tokens_per_joule(ctx, ctx.ns, N.NAMESPACE_TOKENS_PER_JOULE),
        lambda ctx: cost(ctx, "model", N.MODEL_COST),
        lambda ctx: cost(ctx, ctx.ns, N.NAMESPACE_COST)]),
]


def build(ctx: Ctx) -> dash.Dashboard:
    board = base(ctx, UIDS["fleet"], "GPU goodput / Fleet efficiency",
                 "Where GPU money burns: hollow utilisation, idle allocations, tokens per joule "
                 "and cost per million tokens, by model and namespace.")
    return with_rows(ctx, board, ROWS)
