"""Tabulates bench/gpu/shared_gpu.py's results: per process, its own kernel-time share and
SM activity beside the exporter's holder figures, and the checks issue 50 names.

    python3 -m bench.gpu.shared_report timeslice.json mps.json llama.json > report.md
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from collections import Counter
from collections.abc import Iterable
from typing import Any

SKIP = 5.0
"""Seconds of the shared phase skipped at its start (the debounce and the first windows)."""


def _mean(values: Iterable[float]) -> float | None:
    found = list(values)
    return statistics.fmean(found) if found else None


def _series(scrape: dict[str, Any], name: str, **match: str) -> list[tuple[dict[str, str], float]]:
    return [(lbl, v) for n, lbl, v in scrape.get("series", ())
            if n == name and match.items() <= lbl.items()]


def _one(scrape: dict[str, Any], name: str, **match: str) -> float | None:
    rows = _series(scrape, name, **match)
    return sum(v for _, v in rows) if rows else None


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    phases = result["phases"]
    lo, hi = phases["go"] + SKIP, phases["stop"] - 1.0
    scrapes = [s for s in result["scrapes"] if lo <= s["t"] <= hi and "series" in s]
    out: dict[str, Any] = {"scenario": result["scenario"], "scrapes": len(scrapes)}
    gpu_util = _mean(v for s in scrapes
                     if (v := _one(s, "goodput_gpu_utilization_ratio")) is not None)
    gpu_sm = _mean(v for s in scrapes if (v := _one(s, "goodput_gpu_sm_active_ratio")) is not None)
    gpu_busy = _mean(v for s in scrapes
                     if (v := _one(s, "goodput_gpu_graphics_active_ratio")) is not None)
    shares = _mean(v for s in scrapes
                   if (v := _one(s, "goodput_gpu_holder_kernel_time_ratio")) is not None)
    out["gpu"] = {"utilization": gpu_util, "graphics_active": gpu_busy, "sm_active": gpu_sm,
                  "holder_shares_sum": shares}
    procs: dict[str, Any] = {}
    for name, lines in result["workloads"].items():
        pid = str(result["pids"][name])
        own = [r["own_share"] for r in lines
               if r.get("event") == "second" and lo <= r["t"] <= hi]
        span = [r["span_ms"] / 1000.0 for r in lines
                if r.get("event") == "second" and lo <= r["t"] <= hi]
        calib: dict[str, Any] = next((r for r in lines if r.get("event") == "calibrated"), {})
        solo = _solo_fill(result, name)
        mine = [s for s in scrapes if _series(s, "goodput_gpu_holder_kernel_time_ratio", pid=pid)]
        regimes = Counter(lbl["regime"] for s in mine
                          for lbl, _ in _series(s, "goodput_gpu_holder_regime", pid=pid))
        flags = Counter(lbl["reason"] for s in mine
                        for lbl, _ in _series(s, "goodput_gpu_holder_busy_unproductive", pid=pid))
        own_share = _mean(own) if name != "idle" else 0.0
        raw = [r for r in result.get("raw_samples", [])
               if len(r) == 5 and str(r[1]) == pid and lo <= r[2] / 1e6 <= hi]
        procs[name] = {
            "pid": pid,
            "own_share": own_share,
            "event_span_share": _mean(span),
            "solo_ms": calib.get("solo_ms"),
            "solo_busy": calib.get("solo_busy"),
            "solo_fill": solo,
            "own_sm_active": (own_share * solo) if (own_share is not None and solo is not None)
            else None,
            "nvml_samples": len(raw),
            "nvml_sm_util_mean": _mean(r[3] / 100.0 for r in raw),
            "nvml_sample_period_s": _period(raw),
            "exporter_share": _mean(v for s in mine if (
                v := _one(s, "goodput_gpu_holder_kernel_time_ratio", pid=pid)) is not None),
            "exporter_sm_active": _mean(v for s in mine if (
                v := _one(s, "goodput_gpu_holder_sm_active_ratio", pid=pid)) is not None),
            "regime": regimes.most_common(1)[0][0] if regimes else None,
            "regimes": dict(regimes),
            "busy_unproductive_windows": dict(flags),
            "windows": len(mine),
        }
    if result["scenario"] == "llama":
        procs["llama-server"] = _server(result, scrapes, lo, hi, gpu_util, procs.get("gemm"))
    out["processes"] = procs
    return out


def _period(raw: list[list[Any]]) -> float | None:
    """The median gap between one process's consecutive sample timestamps (the driver's
    sample period, where the process ran in consecutive periods)."""
    stamps = sorted(r[2] for r in raw)
    gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(stamps) if b > a]
    return statistics.median(gaps) if gaps else None


def _solo_fill(result: dict[str, Any], name: str) -> float | None:
    """The GPU's SM activity per second of kernel time while ``name`` ran alone (its
    calibration seconds): that process's own fill."""
    at = {"gemm": result["phases"]["gemm_alone"], "tiny": result["phases"]["tiny_alone"]}.get(name)
    if at is None:
        return None
    rows = [s for s in result["scrapes"] if at + 1.5 <= s["t"] <= at + 3.0 and "series" in s]
    fills = []
    for s in rows:
        u = _one(s, "goodput_gpu_graphics_active_ratio") or _one(s, "goodput_gpu_utilization_ratio")
        sm = _one(s, "goodput_gpu_sm_active_ratio")
        if u and sm is not None:
            fills.append(min(sm / u, 1.0))
    return _mean(fills)


def _server(result: dict[str, Any], scrapes: list[dict[str, Any]], lo: float, hi: float,
            gpu_util: float | None, gemm: dict[str, Any] | None) -> dict[str, Any]:
    """The llama-server holder: the pid whose series carry tokens; its share against what
    the GPU ran less the GEMM's own share; its tokens against the clients' and the engine's."""
    pids = Counter(lbl["pid"] for s in scrapes
                   for lbl, _ in _series(s, "goodput_gpu_holder_tokens_per_second"))
    pid = pids.most_common(1)[0][0] if pids else ""
    mine = [s for s in scrapes if _series(s, "goodput_gpu_holder_kernel_time_ratio", pid=pid)]
    tokens = 0.0
    last = None
    for s in mine:
        rate = _one(s, "goodput_gpu_holder_tokens_per_second", pid=pid)
        if last is not None and rate is not None:
            tokens += rate * (s["t"] - last)
        last = s["t"]
    counters = [(s["t"], v) for s in scrapes
                if (v := _one(s, "goodput_gpu_tokens_total", kind="generation")) is not None]
    engine = counters[-1][1] - counters[0][1] if len(counters) > 1 else None
    span = (mine[-1]["t"] - mine[0]["t"]) if len(mine) > 1 else 0.0
    t0, t1 = (mine[0]["t"], mine[-1]["t"]) if mine else (lo, hi)
    client = 0.0
    for began, ended, n in result["clients"]:
        overlap = max(0.0, min(ended, t1) - max(began, t0))
        if ended > began:
            client += n * overlap / (ended - began)
    own_gemm = (gemm or {}).get("own_share")
    return {
        "pid": pid,
        "exporter_share": _mean(v for s in mine if (
            v := _one(s, "goodput_gpu_holder_kernel_time_ratio", pid=pid)) is not None),
        "share_truth": (gpu_util - own_gemm) if (gpu_util is not None and own_gemm is not None)
        else None,
        "exporter_sm_active": _mean(v for s in mine if (
            v := _one(s, "goodput_gpu_holder_sm_active_ratio", pid=pid)) is not None),
        "regime": Counter(lbl["regime"] for s in mine for lbl, _ in
                          _series(s, "goodput_gpu_holder_regime", pid=pid)).most_common(1)[0][0]
        if mine else None,
        "seconds": span,
        "exporter_tokens": tokens,
        "engine_tokens_same_span": engine,
        "client_tokens_same_span": client,
        "tokens_per_kernel_second": _mean(v for s in mine if (
            v := _one(s, "goodput_gpu_holder_tokens_per_kernel_second", pid=pid)) is not None),
        "client_requests": len(result["clients"]),
    }


def _f(v: Any, digits: int = 3) -> str:
    return "-" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))


def render(summaries: list[dict[str, Any]]) -> str:
    lines = []
    for s in summaries:
        g = s["gpu"]
        lines += [f"### {s['scenario']}", "",
                  f"GPU 0 over the shared phase ({s['scrapes']} scrapes): NVML utilization "
                  f"{_f(g['utilization'])}, GPM graphics activity {_f(g['graphics_active'])}, "
                  f"SM active {_f(g['sm_active'])}, holders' kernel shares summed "
                  f"{_f(g['holder_shares_sum'])}.", "",
                  "| process | pid | own share (events, solo-calibrated) | exporter share | "
                  "diff | NVML per-process smUtil (mean of its samples) | own SM active | "
                  "exporter SM active | exporter regime | busy-unproductive windows |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for name, p in s["processes"].items():
            if name == "llama-server":
                continue
            diff = (p["exporter_share"] - p["own_share"]
                    if p["exporter_share"] is not None and p["own_share"] is not None else None)
            lines.append(
                f"| {name} | {p['pid']} | {_f(p['own_share'])} | {_f(p['exporter_share'])} | "
                f"{_f(diff, 3)} | {_f(p['nvml_sm_util_mean'])} ({p['nvml_samples']}) | "
                f"{_f(p['own_sm_active'])} | {_f(p['exporter_sm_active'])} | "
                f"{p['regime']} | {p['busy_unproductive_windows'] or '-'} / {p['windows']} |")
        server = s["processes"].get("llama-server")
        if server:
            lines += ["", "| llama-server | value |", "|---|---|"]
            lines += [f"| {k} | {_f(v)} |" for k, v in server.items()]
        lines.append("")
    return "\n".join(lines)


def main(paths: list[str]) -> None:
    summaries = []
    for path in paths:
        with open(path) as f:
            summaries.append(summarize(json.load(f)))
    print(render(summaries))
    print("```json")
    print(json.dumps(summaries, indent=1))
    print("```")


if __name__ == "__main__":
    main(sys.argv[1:])
