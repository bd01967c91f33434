"""Turn bench/gpu/gpu_validation.py's validation.json into the committed validation reports.

    python3 -m bench.gpu.report path/to/validation.json [--out-dir docs/validation] [--gpu h100]

writes ``core-<gpu>.md`` (which NVML readings and GPM metrics worked, values per workload next
to nvidia-smi, the measured poll cost) and ``efficiency-<gpu>.md`` (observed ratios and regime
per workload against the expected regime, windows to regime, busy-unproductive flags). ``gpu``
is derived from the device name (h100, h200, ...) unless given.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from bench.gpu.gpu_validation import gpu_kind, summarize
from bench.gpu.workloads.panel import WORKLOADS

GIB = 1024.0**3
# Dense bf16 peak (TFLOP/s) by device kind, datasheet figures for the SXM parts; used only for
# the report's own cross-check of the daemon's MFU.
PEAK_BF16_TFLOPS = {"h100": 989.0, "h200": 989.0}
# NVML readings the core publishes, as family -> what it is.
NVML_FAMILIES = {
    "goodput_gpu_up": "device health",
    "goodput_gpu_utilization_ratio": "kernel-time utilization",
    "goodput_gpu_memory_controller_utilization_ratio": "memory-controller utilization",
    "goodput_gpu_memory_used_bytes": "memory used",
    "goodput_gpu_memory_total_bytes": "memory total",
    "goodput_gpu_power_watts": "power draw",
    "goodput_gpu_power_limit_watts": "power limit",
    "goodput_gpu_energy_joules_total": "energy counter",
    "goodput_gpu_temperature_celsius": "temperature",
    "goodput_gpu_clock_hertz": "SM and memory clocks",
    "goodput_gpu_clock_max_hertz": "max clocks",
    "goodput_gpu_clock_event_active": "clock-event (throttle) reasons",
    "goodput_gpu_clock_event_seconds_total": "clock-event time counters",
    "goodput_gpu_ecc_errors_total": "ECC error counters",
    "goodput_gpu_remapped_rows_total": "row remapping",
    "goodput_gpu_row_remap_pending": "row remap pending",
    "goodput_gpu_row_remap_failure": "row remap failure",
    "goodput_gpu_processes": "compute processes",
    "goodput_gpu_xid_errors_total": "XID events (appears once an XID occurred)",
    "goodput_gpu_last_xid": "last XID",
}
# GPM metric ids the GPM source asks for (exporter/sources/gpm.py), id -> published as.
GPM_METRICS = {
    1: "graphics_active", 2: "sm_active", 3: "sm_occupancy", 4: "pipe integer",
    5: "tensor_active", 6: "tensor pipe dfma", 7: "tensor pipe hmma", 8: "tensor pipe dmma",
    9: "tensor pipe imma", 10: "dram_active", 11: "pipe fp64", 12: "pipe fp32",
    13: "pipe fp16", 20: "pcie tx", 21: "pcie rx", 60: "nvlink rx", 61: "nvlink tx",
}
GPM_FAMILIES = {
    1: "goodput_gpu_graphics_active_ratio", 2: "goodput_gpu_sm_active_ratio",
    3: "goodput_gpu_sm_occupancy_ratio", 5: "goodput_gpu_tensor_active_ratio",
    10: "goodput_gpu_dram_active_ratio",
}


def pick(values: Mapping[str, Any] | None, name: str) -> float | None:
    """The value of series ``name`` (exact key, else the first labelled series of it)."""
    if not values:
        return None
    if name in values:
        return float(values[name])
    for key in sorted(values):
        if key.startswith(name + "{"):
            return float(values[key])
    return None


def fmt(value: Any, digits: int = 2, scale: float = 1.0) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return f"{value / scale:.{digits}f}"
    return str(value)


def table(headers: list[str], rows: Iterable[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def workloads(data: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Workloads in the panel's run order (the JSON is written with sorted keys)."""
    order = {name: i for i, name in enumerate(WORKLOADS)}
    items = [(name, _resummarized(data, entry))
             for name, entry in (data.get("workloads") or {}).items()]
    return sorted(items, key=lambda kv: (order.get(kv[0], len(order)), kv[0]))


def _resummarized(data: Mapping[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """Recompute the summary from the raw samples, so a report made with a newer summary
    (e.g. windows from steady state) reads runs recorded before it existed."""
    samples = entry.get("samples")
    if not samples or not entry.get("expected"):
        return entry
    old = entry.get("summary") or {}
    args = data.get("args") or {}
    summary = summarize(samples, entry["expected"], entry.get("acceptable") or (),
                        drop=float(args.get("drop", 5.0)),
                        interval=float(args.get("interval", 1.0)),
                        changes=old.get("regime_changes") or None)
    return {**entry, "summary": summary}


def medians(entry: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    summary = entry.get("summary") or {}
    return summary.get("daemon_medians") or {}, summary.get("smi_medians") or {}


def header(data: Mapping[str, Any], title: str, kind: str) -> list[str]:
    gpu = data.get("gpu") or {}
    host = data.get("host") or {}
    lines = [f"# {title}: {kind.upper()}", ""]
    if data.get("simulate"):
        lines += ["> **Simulated run** (`--simulate`): no real GPU was measured; this file only "
                  "checks the pipeline.", ""]
    lines += [
        "Generated by `bench/gpu/report.py` from `validation.json` written by "
        "`bench/gpu/gpu_validation.py`.",
        "",
        f"- Device: {gpu.get('name', '—')} ({fmt(gpu.get('memory.total'), 0)} MiB), "
        f"driver {gpu.get('driver_version', '—')}, compute capability "
        f"{gpu.get('compute_cap', '—')}, power limit {fmt(gpu.get('power.limit'), 0)} W",
        f"- Run: started {data.get('started', '—')}, finished {data.get('finished', '—')}, "
        f"complete: {fmt(bool(data.get('complete')))}, "
        f"{fmt(data.get('elapsed_seconds'), 0)} s in all",
        f"- Host: Python {host.get('python', '—')}, nvidia-ml-py "
        f"{host.get('nvidia_ml_py') or '—'}, {host.get('cpus', '—')} CPUs",
        f"- Sampling: {fmt((data.get('args') or {}).get('seconds'), 0)} s per workload at "
        f"{fmt((data.get('args') or {}).get('interval'), 1)} s; medians leave out the first "
        f"{fmt((data.get('args') or {}).get('drop'), 0)} s after the workload reported ready",
    ]
    torch_info = next((e.get("info") for _, e in workloads(data)
                       if (e.get("info") or {}).get("torch")), None)
    if torch_info:
        lines.append(f"- Workloads: torch {torch_info.get('torch')} (CUDA "
                     f"{torch_info.get('cuda')}) on {torch_info.get('device')}")
    return [*lines, ""]


# --- core ---------------------------------------------------------------------------------------

def core_report(data: Mapping[str, Any], kind: str) -> str:
    support = data.get("support") or {}
    families = set(support.get("families_gpu0") or [])
    nvml_unsupported = set((support.get("nvml_unsupported") or {}).get("0", []))
    lines = header(data, "Core validation", kind)

    lines += ["## NVML readings", "",
              "A reading *worked* when its family had samples for GPU 0; *unsupported* when "
              "the daemon logged `nvml_metric_unsupported` for it.", ""]
    rows = []
    for family, what in NVML_FAMILIES.items():
        state = "worked" if family in families else "absent"
        rows.append([f"`{family}`", what, state])
    lines += table(["family", "reading", "GPU 0"], rows)
    if nvml_unsupported:
        lines += ["", "Unsupported NVML readings logged for GPU 0: "
                  + ", ".join(f"`{m}`" for m in sorted(nvml_unsupported)) + "."]
    else:
        lines += ["", "No NVML reading was logged as unsupported on GPU 0."]

    lines += ["", "## GPM metrics", ""]
    gpm_support = (support.get("gpm_support") or {}).get("0")
    profiling = support.get("profiling_available") or {}
    reason = (gpm_support or {}).get("reason")
    lines.append(f"- GPM support on GPU 0: "
                 f"{fmt(gpm_support.get('supported')) if gpm_support else '—'}"
                 f"{f' ({reason})' if reason else ''}")
    if profiling:
        lines.append("- `goodput_gpu_profiling_available`: "
                     + ", ".join(f"`{k.split('{', 1)[-1].rstrip('}')}` = {fmt(v, 0)}"
                                 for k, v in sorted(profiling.items())))
    dropped = set(support.get("gpm_unsupported_ids") or [])
    lines.append("")
    rows = []
    for metric_id, what in GPM_METRICS.items():
        if not gpm_support or not gpm_support.get("supported"):
            state = "—"
        elif metric_id in dropped:
            state = "unsupported"
        else:
            state = "worked"
        rows.append([str(metric_id), what, state])
    lines += table(["GPM id", "metric", "state"], rows)

    lines += ["", "## Values per workload, next to nvidia-smi", "",
              "Steady-state medians on GPU 0: the daemon's value, then `nvidia-smi`'s.", ""]
    rows = []
    for name, entry in workloads(data):
        d, s = medians(entry)
        rows.append([
            name, entry.get("status", "—"),
            f"{fmt(pick(d, 'goodput_gpu_utilization_ratio'), 0, 0.01)} / "
            f"{fmt(s.get('utilization.gpu'), 0)}",
            f"{fmt(pick(d, 'goodput_gpu_memory_controller_utilization_ratio'), 0, 0.01)} / "
            f"{fmt(s.get('utilization.memory'), 0)}",
            f"{fmt(pick(d, 'goodput_gpu_power_watts'), 0)} / {fmt(s.get('power.draw'), 0)}",
            f"{fmt(pick(d, 'goodput_gpu_memory_used_bytes'), 1, GIB)} / "
            f"{fmt(s.get('memory.used'), 1, 1024.0)}",
            f"{fmt(pick(d, 'goodput_gpu_clock_hertz{domain=sm}'), 0, 1e6)} / "
            f"{fmt(s.get('clocks.sm'), 0)}",
            f"{fmt(pick(d, 'goodput_gpu_temperature_celsius'), 0)} / "
            f"{fmt(s.get('temperature.gpu'), 0)}",
            fmt(pick(d, "goodput_gpu_sm_active_ratio")),
            fmt(pick(d, "goodput_gpu_tensor_active_ratio")),
            fmt(pick(d, "goodput_gpu_dram_active_ratio")),
        ])
    lines += table(["workload", "status", "util %", "mem ctrl %", "power W", "memory GiB",
                    "SM clock MHz", "temp °C", "SM active", "tensor", "DRAM"], rows)
    failed = [(n, e) for n, e in workloads(data) if e.get("status") != "ok"]
    if failed:
        lines += ["", "Workloads that did not complete:", ""]
        lines += [f"- `{n}`: {e.get('status')}: {e.get('error', '')}" for n, e in failed]

    lines += ["", "## Poll cost", ""]
    lines += poll_cost_lines(data)
    errors = support.get("log_errors") or []
    if errors:
        lines += ["", "## Errors the daemon logged", ""]
        lines += [f"- `{e.get('event')}`: "
                  + ", ".join(f"{k}={v}" for k, v in e.items()
                              if k not in ("event", "level", "timestamp"))
                  for e in errors[:15]]
    return "\n".join(lines) + "\n"


def poll_cost_lines(data: Mapping[str, Any]) -> list[str]:
    cost = data.get("poll_cost") or {}
    if not cost or cost.get("error"):
        return [f"Not measured: {cost.get('error', 'no data')}."]
    rss = cost.get("rss") or {}
    pct = cost.get("cpu_percent_of_core_per_gpu")
    lines = [
        f"Measured over {fmt(cost.get('quiet_seconds'), 0)} s with the daemon polling every "
        f"{fmt(cost.get('interval_seconds'), 1)} s and nobody scraping it (GPU idle), "
        f"{cost.get('gpus', '—')} GPU(s):",
        "",
        f"- daemon CPU (utime + stime from /proc): {fmt(cost.get('cpu_seconds'), 3)} s, "
        f"**{fmt(pct, 3)} % of one core per GPU** (target: under 1 %: "
        f"{'met' if pct is not None and pct < 1.0 else 'not met' if pct is not None else '—'})",
        f"- daemon RSS: {fmt(rss.get('VmRSS'), 1, 1024.0**2)} MiB "
        f"(peak {fmt(rss.get('VmHWM'), 1, 1024.0**2)} MiB; target under 80 MiB)",
    ]
    with_scrapes = [e.get("daemon_cpu_percent_with_scrapes") for _, e in workloads(data)
                    if e.get("daemon_cpu_percent_with_scrapes") is not None]
    if with_scrapes:
        with_scrapes.sort()
        lines.append(f"- while scraped every second during the workloads: "
                     f"{fmt(with_scrapes[len(with_scrapes) // 2], 2)} % of one core for the "
                     f"whole daemon (median over workloads; includes rendering /metrics once "
                     f"a second)")
    phases = (data.get("daemon") or {}).get("phases") or []
    for phase in phases:
        end = phase.get("rss_end") or phase.get("rss") or {}
        if end:
            lines.append(f"- RSS at the end of phase `{phase.get('phase')}`: "
                         f"{fmt(end.get('VmRSS'), 1, 1024.0**2)} MiB")
    polls = cost.get("poll_duration") or {}
    if polls:
        lines += ["", "Poll duration per source over the quiet window "
                  "(`goodput_exporter_poll_duration_seconds` sum / count):", ""]
        lines += table(["source", "polls", "mean ms", "total polls in run so far"],
                       [[src, fmt(row.get("count"), 0), fmt(row.get("mean_seconds"), 3, 1e-3),
                         fmt(row.get("count_total"), 0)]
                        for src, row in sorted(polls.items())])
    return lines


# --- efficiency ---------------------------------------------------------------------------------

def verdict(entry: Mapping[str, Any], max_windows: int = 3) -> str:
    summary = entry.get("summary") or {}
    if entry.get("status") != "ok":
        return str(entry.get("status", "—"))
    if summary.get("steady_regime") in (None, "none"):
        return "no regime data"
    good = {entry.get("expected"), *(entry.get("acceptable") or [])}
    wtr = summary.get("windows_from_steady")
    regime_ok = summary.get("steady_regime") in good and wtr is not None and wtr <= max_windows
    flags = summary.get("busy_unproductive_share") or {}
    flagged = any(v > 0.5 for v in flags.values())
    want = entry.get("expect_unproductive")
    flag_ok = want is None or flagged == want
    if regime_ok and flag_ok:
        return "pass"
    why = []
    if not regime_ok:
        why.append("regime")
    if not flag_ok:
        why.append("flag")
    return "FAIL (" + ", ".join(why) + ")"


def efficiency_report(data: Mapping[str, Any], kind: str) -> str:
    lines = header(data, "Efficiency model validation", kind)
    lines += [
        "Each workload runs alone on GPU 0 next to the daemon. *from ready* counts 1 s "
        "daemon windows from the moment the workload reported ready to the first window "
        "showing the expected regime; *from steady* counts them from steady state, the first "
        "sample from which kernel time, graphics, SM, tensor and DRAM activity all stay within "
        "0.05 of their steady medians (the workload's own warm-up over and the daemon's window "
        "covering only the workload); *share* is the share of steady-state windows that show "
        "the regime. Target: the expected regime within 3 windows of steady state, no "
        "busy-unproductive flag on the compute- or memory-bound workloads.",
        "",
    ]
    rows = []
    for name, entry in workloads(data):
        summary = entry.get("summary") or {}
        flags = summary.get("busy_unproductive_share") or {}
        flag_text = ", ".join(f"{k} {fmt(v, 2)}" for k, v in sorted(flags.items()) if v) or "none"
        expected = entry.get("expected", "—")
        if entry.get("acceptable"):
            expected += " (or " + ", ".join(entry["acceptable"]) + ")"
        rows.append([name, expected, fmt(summary.get("steady_regime")),
                     fmt(summary.get("windows_to_regime"), 0),
                     fmt(summary.get("windows_from_steady"), 0), fmt(summary.get("regime_share")),
                     flag_text, verdict(entry)])
    lines += table(["workload", "expected regime", "observed (steady)", "from ready",
                    "from steady", "share", "busy_unproductive (share of windows)",
                    "verdict"], rows)

    lines += ["", "## Observed ratios (steady-state medians)", ""]
    rows = []
    for name, entry in workloads(data):
        d, _ = medians(entry)
        rows.append([name] + [fmt(pick(d, f)) for f in (
            "goodput_gpu_utilization_ratio", "goodput_gpu_sm_active_ratio",
            "goodput_gpu_sm_occupancy_ratio", "goodput_gpu_tensor_active_ratio",
            "goodput_gpu_dram_active_ratio", "goodput_gpu_hollow_utilization_ratio",
            "goodput_gpu_efficiency_score_ratio")] + [fmt(pick(d, "goodput_gpu_power_watts"), 0)])
    lines += table(["workload", "util", "SM active", "occupancy", "tensor", "DRAM", "hollow",
                    "score", "power W"], rows)

    lines += ["", "## Pipes (steady-state medians)", ""]
    pipes = ["fp16", "fp32", "fp64", "integer"]
    tensor_pipes = ["hmma", "imma", "dfma", "dmma"]
    rows = []
    for name, entry in workloads(data):
        d, _ = medians(entry)
        rows.append([name]
                    + [fmt(pick(d, f"goodput_gpu_pipe_active_ratio{{pipe={p}}}")) for p in pipes]
                    + [fmt(pick(d, f"goodput_gpu_tensor_pipe_active_ratio{{pipe={p}}}"))
                       for p in tensor_pipes])
    lines += table(["workload", *pipes, *(f"tensor {p}" for p in tensor_pipes)], rows)

    lines += ["", "## Serving-derived gauges", ""]
    lines += serving_lines(data, kind)

    lines += ["", "## Workload throughput (as the workloads measured it)", ""]
    rows = []
    for name, entry in workloads(data):
        stats = entry.get("stats") or {}
        shown = {k: v for k, v in stats.items() if isinstance(v, (int, float))}
        rows.append([name, entry.get("description", ""),
                     ", ".join(f"{k} {fmt(v)}" for k, v in sorted(shown.items())) or "—"])
    lines += table(["workload", "what it does", "measured"], rows)

    lines += ["", "## Regime sequences", "",
              "Regime per 1 s window from the ready moment, run-length encoded.", ""]
    for name, entry in workloads(data):
        seq = (entry.get("summary") or {}).get("regime_sequence") or []
        lines.append(f"- `{name}`: " + (" → ".join(f"{r} x{n}" for r, n in seq) or "—"))
    return "\n".join(lines) + "\n"


def serving_lines(data: Mapping[str, Any], kind: str) -> list[str]:
    out: list[str] = []
    peak = PEAK_BF16_TFLOPS.get(kind)
    for name, entry in workloads(data):
        summary = entry.get("summary") or {}
        if summary.get("engine_tokens_per_second") is None:
            continue
        d, _ = medians(entry)
        info = entry.get("info") or {}
        engine_tps = summary.get("engine_tokens_per_second")
        watts = pick(d, "goodput_gpu_power_watts")
        flops_per_token = info.get("flops_per_token")
        own_jpt = watts / engine_tps if watts and engine_tps else None
        # MFU counts every token that took a forward pass: the prompt's (prefill) too.
        all_tps = (engine_tps or 0.0) + (summary.get("engine_prompt_tokens_per_second") or 0.0)
        own_mfu = (all_tps * flops_per_token / (peak * 1e12)
                   if all_tps and flops_per_token and peak else None)
        out += [f"`{name}` ({info.get('model', '—')}, {fmt(info.get('params'), 2, 1e9)} B "
                f"parameters read per token):", ""]
        rows: list[list[str]] = [
            ["generation tokens/s", fmt(summary.get("tokens_per_second"), 0),
             fmt(engine_tps, 0), "engine's own vllm:generation_tokens_total"],
            ["tokens per SM-second", fmt(pick(d, "goodput_gpu_tokens_per_sm_second"), 0),
             _ratio(engine_tps, pick(d, "goodput_gpu_sm_active_ratio")),
             "engine tokens/s ÷ SM active"],
            ["joules per token", fmt(pick(d, "goodput_gpu_joules_per_token"), 3),
             fmt(own_jpt, 3), "power ÷ engine tokens/s"],
            ["MFU", fmt(pick(d, "goodput_gpu_mfu_ratio"), 4), fmt(own_mfu, 4),
             f"(prompt + generation) tokens/s x {fmt(flops_per_token, 1, 1e9)} GFLOP/token ÷ "
             f"{fmt(peak, 0)} TFLOP/s dense bf16"],
            ["KV cache usage", fmt(pick(d, "goodput_gpu_kv_cache_usage_ratio")), "—", ""],
        ]
        out += table(["gauge", "daemon", "cross-check", "cross-check from"], rows)
        out.append("")
    return out or ["No serving workload was measured."]


def _ratio(num: float | None, den: float | None) -> str:
    return fmt(num / den, 0) if num and den else "—"


def write_reports(data: Mapping[str, Any], out_dir: Path, kind: str | None = None) -> list[Path]:
    kind = kind or ("simulated" if data.get("simulate")
                    else gpu_kind(str((data.get("gpu") or {}).get("name", "unknown"))))
    out_dir.mkdir(parents=True, exist_ok=True)
    makers: dict[str, Callable[[Mapping[str, Any], str], str]] = {
        "core": core_report, "efficiency": efficiency_report}
    paths = []
    for prefix, make in makers.items():
        path = out_dir / f"{prefix}-{kind}.md"
        path.write_text(make(data, kind))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("validation_json")
    parser.add_argument("--out-dir", default="docs/validation")
    parser.add_argument("--gpu", default=None, help="file suffix (default: from the GPU name)")
    args = parser.parse_args(argv)
    try:
        data = json.loads(Path(args.validation_json).read_text())
    except (OSError, ValueError) as exc:
        print(f"report: cannot read {args.validation_json}: {exc}", file=sys.stderr)
        return 2
    for path in write_reports(data, Path(args.out_dir), args.gpu):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
