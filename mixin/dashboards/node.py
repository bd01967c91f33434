"""Node / GPU drilldown: the utilisation lie made visible, regime, power, clocks, errors. One
builder per panel, in rows (ROWS)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import stat, statetimeline, timeseries
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as model

from exporter.model import regimes
from mixin.dashboards.common import (
    NEEDS_EXTENDED,
    UIDS,
    Ctx,
    PanelBuilder,
    base,
    query,
    series,
    with_rows,
)

# The state timeline: each regime's number and colour, from the regimes' one declaration in
# the model (goodput_gpu_regime has one series per GPU, the current regime's).
LINE = "{{node}} gpu {{gpu}}"


def _regime_expr(ctx: Ctx) -> str:
    terms = [f'goodput_gpu_regime{{{ctx.gpu_f}, regime="{r.name}"}} * {r.timeline}'
             for r in regimes.by_timeline()]
    # max, not sum: an old and a new exporter pod reporting one GPU must not add up.
    return f"max by ({ctx.gk}) (" + " or ".join(terms) + ")"


def _regime_mappings() -> list[model.ValueMapping]:
    return [model.ValueMap(options={str(r.timeline): model.ValueMappingResult(
                text=r.name, color=r.colour, index=r.timeline)})
            for r in regimes.by_timeline()]


def _rate(ctx: Ctx, counter: str, *labels: str) -> str:
    """One line per GPU (and label) while an old and a new exporter pod both report it."""
    return ctx.one_per_gpu(f"rate({counter}{{{ctx.gpu_f}}}[$__rate_interval])", *labels)


def _ratio(ctx: Ctx, counter: str) -> str:
    """A counter's share of the profiled time."""
    profiled = _rate(ctx, "goodput_gpu_profiled_seconds_total")
    return f"{_rate(ctx, counter)} / ({profiled} > 0)"


def _gauge(ctx: Ctx, metric: str, matchers: str = "") -> str:
    return f"{metric}{{{', '.join(m for m in (ctx.gpu_f, matchers) if m)}}}"


def utilization_lie(ctx: Ctx) -> timeseries.Panel:
    return series(
        ctx, "The utilization lie: kernel time vs SM active vs tensor vs DRAM (GPU $gpu)",
        "percentunit",
        (_rate(ctx, "goodput_gpu_utilization_seconds_total"), f"{LINE} kernel time"),
        (_ratio(ctx, "goodput_gpu_sm_active_seconds_total"), f"{LINE} SM active"),
        (_ratio(ctx, "goodput_gpu_tensor_active_seconds_total"), f"{LINE} tensor"),
        (_ratio(ctx, "goodput_gpu_dram_active_seconds_total"), f"{LINE} DRAM"),
        description="Kernel time is what nvidia-smi calls utilisation: a kernel was "
        "resident. SM active, tensor and DRAM say how much work was done. A high kernel "
        "line over a low SM line is hollow utilisation. SM active, tensor and DRAM need a "
        "profiling source (GPM on Hopper and newer, or DCGM).",
        span=24,
    ).min(0).max(1).repeat("gpu").repeat_direction("h").height(9)


def regime(ctx: Ctx) -> statetimeline.Panel:
    return (statetimeline.Panel().title("Regime")
            .description("The bottleneck regime the exporter infers for each GPU.")
            .datasource(ctx.ds)
            .with_target(query(ctx, _regime_expr(ctx), LINE))
            .mappings(_regime_mappings())
            .show_value(cm.VisibilityMode.NEVER)
            .unit("none").height(8).span(24))


def power(ctx: Ctx) -> timeseries.Panel:
    return series(
        ctx, "Power", "watt",
        (_gauge(ctx, "goodput_gpu_power_watts"), LINE),
        (_gauge(ctx, "goodput_gpu_power_limit_watts"), f"{LINE} limit"),
        description="Board power draw. The limit line needs --extended-metrics "
        "(Helm: exporter.extendedMetrics=true); without it only the draw is shown.")


def energy(ctx: Ctx) -> stat.Panel:
    # A sum over the exporter pods, not a max: across the range each pod counted only the
    # energy of its own lifetime (a rollover replaces pods one after the other).
    joules = f"increase({_gauge(ctx, 'goodput_gpu_energy_joules_total')}[$__range])"
    return (stat.Panel().title("Energy in range")
            .description("Board energy each GPU used over the dashboard's time range.")
            .datasource(ctx.ds)
            .with_target(query(ctx, f"sum by ({ctx.gk}) ({joules}) / 3.6e6", LINE,
                               instant=True))
            .unit("kwatth").height(8).span(12))


def sm_clock(ctx: Ctx) -> timeseries.Panel:
    return series(
        ctx, "SM clock (needs --extended-metrics)", "hertz",
        (_gauge(ctx, "goodput_gpu_clock_hertz", 'domain="sm"'), LINE),
        (_gauge(ctx, "goodput_gpu_clock_max_hertz", 'domain="sm"'), f"{LINE} max"),
        description="Current and maximum SM clock. Both families are outside the default "
        "series budget: they need --extended-metrics.", no_value=NEEDS_EXTENDED)


def throttling(ctx: Ctx) -> timeseries.Panel:
    return series(
        ctx, "Throttling (share of time clocks were held down)", "percentunit",
        (_rate(ctx, "goodput_gpu_clock_event_seconds_total", "reason"), LINE + " {{reason}}"),
        description="Share of time each clock-event reason held the clocks down (thermal, "
        "power brake, power cap, ...); GPUThermalThrottling and GPUPowerBrake fire on it.",
        no_value="No clock event in range.")


def temperature(ctx: Ctx) -> timeseries.Panel:
    return series(ctx, "Temperature", "celsius",
                  (_gauge(ctx, "goodput_gpu_temperature_celsius"), LINE),
                  description="GPU core temperature.")


def memory(ctx: Ctx) -> timeseries.Panel:
    return series(
        ctx, "Memory used", "bytes",
        (_gauge(ctx, "goodput_gpu_memory_used_bytes"), LINE),
        (_gauge(ctx, "goodput_gpu_memory_total_bytes"), f"{LINE} total"),
        description="Frame-buffer memory used against the GPU's total.")


def xid(ctx: Ctx) -> timeseries.Panel:
    xids = f"increase({_gauge(ctx, 'goodput_gpu_xid_errors_total')}[$__rate_interval])"
    return series(
        ctx, "XID errors", "none", (xids, LINE + " xid {{xid}}"),
        description="XID events by GPU and XID number; see the GPUXidCritical runbook for "
        "the classes.", no_value="No XID error in range.")


def ecc_and_up(ctx: Ctx) -> timeseries.Panel:
    ecc = f"increase({_gauge(ctx, 'goodput_gpu_ecc_errors_total')}[$__rate_interval])"
    return series(
        ctx, "ECC errors and GPU availability", "none",
        (ecc, LINE + " ECC {{type}}"),
        (_gauge(ctx, "goodput_gpu_up"), LINE + " up {{reason}}"),
        description="ECC error counts by type (GPUEccUncorrectable) and goodput_gpu_up: 0 "
        "when the GPU fell off the bus or stopped answering (GPULost).")


HOLDER = "{{namespace}}/{{pod}} {{container}} {{pid}}"
NOT_SHARED = ("No GPU in scope is shared: holders appear when two or more pods or processes "
              "hold one GPU (time-slicing or MPS).")


def _holders(ctx: Ctx, counter: str) -> str:
    """One stacked line per holder of the selected GPU (labels in the configured names)."""
    lb = ctx.cfg.labels
    labels = [lb.namespace, lb.pod, lb.container, "pid"]
    return ctx.one_per_gpu(f"rate({counter}{{{ctx.gpu_f}}}[$__rate_interval])", *labels)


def _stacked(panel: timeseries.Panel) -> timeseries.Panel:
    return (panel.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
            .fill_opacity(60).min(0).max(1))


def holder_kernel_time(ctx: Ctx) -> timeseries.Panel:
    return _stacked(series(
        ctx, "Holders of shared GPUs: kernel time (GPU $gpu)", "percentunit",
        (_holders(ctx, "goodput_gpu_holder_kernel_seconds_total"), f"{LINE} {HOLDER}"),
        (_rate(ctx, "goodput_gpu_utilization_seconds_total"), f"{LINE} GPU kernel time"),
        description="Each pod (or process) holding a GPU that several share (time-slicing or "
        "MPS), stacked: its share of the GPU's kernel time, measured per process by NVML. "
        "The stack reaches the GPU's kernel time (its own line). A pod that burns the GPU and "
        "one that idles are told apart here, not in the per-GPU panels.",
        no_value=NOT_SHARED))


def holder_sm_active(ctx: Ctx) -> timeseries.Panel:
    return _stacked(series(
        ctx, "Holders of shared GPUs: SM active (estimate, GPU $gpu)", "percentunit",
        (_holders(ctx, "goodput_gpu_holder_sm_active_seconds_total"), f"{LINE} {HOLDER}"),
        description="The GPU's SM activity apportioned to each holder, stacked: unmixed from "
        "the windows where the holders' mix changed (one started, stopped or burst), else in "
        "proportion to kernel time (docs/kubernetes.md). A holder with a tall kernel-time "
        "band and a thin SM band is hollow (GPUHolderBusyButUnproductive).",
        no_value=NOT_SHARED))


ROWS: list[tuple[str, list[PanelBuilder]]] = [
    ("The utilization lie", [utilization_lie, regime]),
    ("Holders of shared GPUs", [holder_kernel_time, holder_sm_active]),
    ("Power and energy", [power, energy]),
    ("Clocks and throttling", [sm_clock, throttling, temperature, memory]),
    ("Errors", [xid, ecc_and_up]),
]


def build(ctx: Ctx) -> dash.Dashboard:
    board = base(ctx, UIDS["node"], "GPU goodput / Node and GPU drilldown",
                 "One node, one GPU: what kernel-time utilisation hides, the regime, power, "
                 "clocks, throttling and errors.", names=("cluster", "node", "gpu"),
                 node_from="goodput_gpu_info")
    return with_rows(ctx, board, ROWS)
