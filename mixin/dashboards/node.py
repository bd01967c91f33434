"""Node / GPU drilldown: the utilisation lie made visible, regime, power, clocks, errors."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import stat, statetimeline
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as model

from mixin.dashboards.common import NEEDS_EXTENDED, UIDS, Ctx, base, query, series

# Regime -> number for the state timeline (goodput_gpu_regime has one series per GPU, the
# current regime's).
REGIMES = [("idle", "#808080"), ("allocated_idle", "#FF9830"), ("host_bound", "#FADE2A"),
           ("launch_bound", "#F2495C"), ("memory_bound", "#5794F2"),
           ("compute_bound", "#73BF69"), ("unknown", "#B877D9"), ("comm_wait", "#8AB8FF"),
           ("transfer_bound", "#FFB357")]


def _regime_expr(ctx: Ctx) -> str:
    terms = [f'goodput_gpu_regime{{{ctx.gpu_f}, regime="{name}"}} * {i}'
             for i, (name, _) in enumerate(REGIMES)]
    # max, not sum: an old and a new exporter pod reporting one GPU must not add up.
    return f"max by ({ctx.gk}) (" + " or ".join(terms) + ")"


def _regime_mappings() -> list[model.ValueMapping]:
    return [model.ValueMap(options={str(i): model.ValueMappingResult(text=name, color=color,
                                                                      index=i)})
            for i, (name, color) in enumerate(REGIMES)]


def build(ctx: Ctx) -> dash.Dashboard:
    GPU = ctx.gpu_f

    def _rate(counter: str, *labels: str) -> str:
        # One line per GPU (and label) while an old and a new exporter pod both report it.
        return ctx.one_per_gpu(f"rate({counter}{{{GPU}}}[$__rate_interval])", *labels)

    def _ratio(counter: str) -> str:
        return f"{_rate(counter)} / ({_rate('goodput_gpu_profiled_seconds_total')} > 0)"

    board = base(ctx, UIDS["node"], "GPU goodput / Node and GPU drilldown",
                 "One node, one GPU: what kernel-time utilisation hides, the regime, power, "
                 "clocks, throttling and errors.", names=("cluster", "node", "gpu"),
                 node_from="goodput_gpu_info")
    board.with_row(dash.Row("The utilization lie"))
    board.with_panel(
        series(
            ctx,
            "The utilization lie: kernel time vs SM active vs tensor vs DRAM (GPU $gpu)",
            "percentunit",
            (_rate("goodput_gpu_utilization_seconds_total"), "{{node}} gpu {{gpu}} kernel time"),
            (_ratio("goodput_gpu_sm_active_seconds_total"), "{{node}} gpu {{gpu}} SM active"),
            (_ratio("goodput_gpu_tensor_active_seconds_total"), "{{node}} gpu {{gpu}} tensor"),
            (_ratio("goodput_gpu_dram_active_seconds_total"), "{{node}} gpu {{gpu}} DRAM"),
            description="Kernel time is what nvidia-smi calls utilisation: a kernel was "
            "resident. SM active, tensor and DRAM say how much work was done. A high kernel "
            "line over a low SM line is hollow utilisation. SM active, tensor and DRAM need a "
            "profiling source (GPM on Hopper and newer, or DCGM).",
            span=24,
        ).min(0).max(1).repeat("gpu").repeat_direction("h").height(9)
    )
    board.with_panel(
        statetimeline.Panel()
        .title("Regime")
        .description("The bottleneck regime the exporter infers for each GPU.")
        .datasource(ctx.ds)
        .with_target(query(ctx, _regime_expr(ctx), "{{node}} gpu {{gpu}}"))
        .mappings(_regime_mappings())
        .show_value(cm.VisibilityMode.NEVER)
        .unit("none")
        .height(8).span(24)
    )
    board.with_row(dash.Row("Power and energy"))
    board.with_panel(series(
        ctx, "Power", "watt",
        (f"goodput_gpu_power_watts{{{GPU}}}", "{{node}} gpu {{gpu}}"),
        (f"goodput_gpu_power_limit_watts{{{GPU}}}", "{{node}} gpu {{gpu}} limit"),
        description="Board power draw. The limit line needs --extended-metrics "
        "(Helm: exporter.extendedMetrics=true); without it only the draw is shown."))
    board.with_panel(
        stat.Panel().title("Energy in range")
        .description("Board energy each GPU used over the dashboard's time range.")
        .datasource(ctx.ds)
        # A sum over the exporter pods, not a max: across the range each pod counted only
        # the energy of its own lifetime (a rollover replaces pods one after the other).
        .with_target(query(
            ctx, f"sum by ({ctx.gk}) "
            f"(increase(goodput_gpu_energy_joules_total{{{GPU}}}[$__range]))"
            " / 3.6e6", "{{node}} gpu {{gpu}}", instant=True))
        .unit("kwatth").height(8).span(12)
    )
    board.with_row(dash.Row("Clocks and throttling"))
    board.with_panel(series(
        ctx, "SM clock (needs --extended-metrics)", "hertz",
        (f'goodput_gpu_clock_hertz{{{GPU}, domain="sm"}}', "{{node}} gpu {{gpu}}"),
        (f'goodput_gpu_clock_max_hertz{{{GPU}, domain="sm"}}', "{{node}} gpu {{gpu}} max"),
        description="Current and maximum SM clock. Both families are outside the default "
        "series budget: they need --extended-metrics.", no_value=NEEDS_EXTENDED))
    board.with_panel(series(
        ctx, "Throttling (share of time clocks were held down)", "percentunit",
        (_rate("goodput_gpu_clock_event_seconds_total", "reason"),
         "{{node}} gpu {{gpu}} {{reason}}"),
        description="Share of time each clock-event reason held the clocks down (thermal, "
        "power brake, power cap, ...); GPUThermalThrottling and GPUPowerBrake fire on it.",
        no_value="No clock event in range."))
    board.with_panel(series(
        ctx, "Temperature", "celsius",
        (f"goodput_gpu_temperature_celsius{{{GPU}}}", "{{node}} gpu {{gpu}}"),
        description="GPU core temperature."))
    board.with_panel(series(
        ctx, "Memory used", "bytes",
        (f"goodput_gpu_memory_used_bytes{{{GPU}}}", "{{node}} gpu {{gpu}}"),
        (f"goodput_gpu_memory_total_bytes{{{GPU}}}", "{{node}} gpu {{gpu}} total"),
        description="Frame-buffer memory used against the GPU's total."))
    board.with_row(dash.Row("Errors"))
    board.with_panel(series(
        ctx, "XID errors", "none",
        (f"increase(goodput_gpu_xid_errors_total{{{GPU}}}[$__rate_interval])",
         "{{node}} gpu {{gpu}} xid {{xid}}"),
        description="XID events by GPU and XID number; see the GPUXidCritical runbook for "
        "the classes.", no_value="No XID error in range."))
    board.with_panel(series(
        ctx, "ECC errors and GPU availability", "none",
        (f"increase(goodput_gpu_ecc_errors_total{{{GPU}}}[$__rate_interval])",
         "{{node}} gpu {{gpu}} ECC {{type}}"),
        (f"goodput_gpu_up{{{GPU}}}", "{{node}} gpu {{gpu}} up {{reason}}"),
        description="ECC error counts by type (GPUEccUncorrectable) and goodput_gpu_up: 0 "
        "when the GPU fell off the bus or stopped answering (GPULost)."))
    return board
