"""Pure analysis of what the daemon exposed during a bench run (no processes, no GPU).

Parses /metrics bodies into per-device series, finds regime changes in the daemon's JSON log,
and summarises a workload's samples (steady-state medians, windows to the expected regime).
Unit-tested in tests/test_bench_report.py.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

# Per-device label names that identify the device rather than the series.
DEVICE_LABELS = frozenset({"gpu", "uuid", "node", "namespace", "pod", "container"})


def series_key(name: str, labels: Mapping[str, str]) -> str:
    """``name{a=1,b=2}`` with device-identity labels left out; plain ``name`` if none left."""
    rest = sorted((k, v) for k, v in labels.items() if k not in DEVICE_LABELS)
    if not rest:
        return name
    return name + "{" + ",".join(f"{k}={v}" for k, v in rest) + "}"


def parse_exposition(text: str, gpu: str) -> tuple[dict[str, float], dict[str, float]]:
    """Split a /metrics body into (series of device ``gpu``, node series), keyed by
    :func:`series_key`. Histogram buckets, ``_created`` and info-style series are skipped."""
    from prometheus_client.parser import text_string_to_metric_families

    device: dict[str, float] = {}
    node: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name.endswith(("_bucket", "_created")) or name in (
                "goodput_gpu_info", "goodput_exporter_build_info"
            ):
                continue
            if "gpu" in sample.labels:
                if sample.labels["gpu"] == gpu:
                    device[series_key(name, sample.labels)] = float(sample.value)
            else:
                node[series_key(name, sample.labels)] = float(sample.value)
    return device, node


def job_state(text: str) -> dict[str, dict[str, Any]]:
    """The job-level verdicts in a /metrics body, keyed ``namespace/job_id``: ``gpus`` (the
    value of ``goodput_job_gpus``: how many GPUs the daemon judged together) and
    ``stragglers`` (the ``gpu`` labels of ``goodput_job_straggler``, sorted). A job appears
    only when the daemon knew which GPUs one pod or job holds."""
    from prometheus_client.parser import text_string_to_metric_families

    jobs: dict[str, dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in ("goodput_job_gpus", "goodput_job_straggler"):
            continue
        for sample in family.samples:
            labels = sample.labels
            job = jobs.setdefault(f"{labels.get('namespace', '')}/{labels.get('job_id', '')}",
                                  {"gpus": None, "stragglers": []})
            if family.name == "goodput_job_gpus":
                job["gpus"] = float(sample.value)
            elif sample.value >= 0.5 and "gpu" in labels:
                job["stragglers"] = sorted({*job["stragglers"], labels["gpu"]})
    return jobs


def active_label(values: Mapping[str, float], family: str, label: str) -> list[str]:
    """Label values of ``family`` series whose value is 1 (a state set such as the regime)."""
    out = []
    prefix = family + "{"
    for key, value in values.items():
        if key.startswith(prefix) and value >= 0.5:
            labels = dict(part.split("=", 1) for part in key[len(prefix):-1].split(","))
            if label in labels:
                out.append(labels[label])
    return sorted(out)


def run_lengths(seq: Iterable[str]) -> list[list[Any]]:
    """``a a b`` -> ``[["a", 2], ["b", 1]]``."""
    out: list[list[Any]] = []
    for item in seq:
        if out and out[-1][0] == item:
            out[-1][1] += 1
        else:
            out.append([item, 1])
    return out


def median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and v == v]
    return statistics.median(vals) if vals else None


def counter_rate(samples: list[dict[str, Any]], section: str, key_prefix: str) -> float | None:
    """Per-second rate of the sum of counters whose key starts with ``key_prefix``."""
    points = []
    for s in samples:
        values = s.get(section) or {}
        matched = [v for k, v in values.items() if k.startswith(key_prefix)]
        if matched:
            points.append((s["t"], sum(matched)))
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return float((points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0]))


def regime_changes(lines: Iterable[str], gpu: str, ready_time: float) -> list[list[Any]]:
    """``[seconds after ready, regime]`` from the daemon's ``regime_changed`` log lines of
    ``gpu``; the last change before the ready moment is kept (clamped to 0) as the regime the
    workload started under."""
    out: list[list[Any]] = []
    before: list[Any] | None = None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("event") != "regime_changed":
            continue
        if str(rec.get("gpu")) != gpu or "timestamp" not in rec:
            continue
        try:
            when = datetime.fromisoformat(str(rec["timestamp"]).replace("Z", "+00:00"))
        except ValueError:
            continue
        rel = when.timestamp() - ready_time
        regime = rec.get("state", rec.get("regime"))  # the daemon logs "state" now
        if rel < 0:
            before = [0.0, regime]
        else:
            out.append([round(rel, 3), regime])
    return ([before] if before else []) + out


def log_windows_to_regime(changes: list[list[Any]], good: set[str], interval: float
                          ) -> int | None:
    """Whole windows from ready until the regime log first says a ``good`` regime."""
    for rel, regime in changes:
        if regime in good:
            return math.ceil(rel / interval - 1e-6) if rel > 0 else 0
    return None


STEADY_SIGNALS = (
    "goodput_gpu_utilization_ratio",
    "goodput_gpu_graphics_active_ratio",
    "goodput_gpu_sm_active_ratio",
    "goodput_gpu_tensor_active_ratio",
    "goodput_gpu_dram_active_ratio",
)


MEMORY_USED = "goodput_gpu_memory_used_bytes"  # compared relatively: allocated-idle's signal


def steady_start(samples: list[dict[str, Any]], medians: Mapping[str, float | None],
                 tolerance: float = 0.05) -> float | None:
    """Time of the first sample from which every profiling signal stays within ``tolerance``
    of its steady-state median: when the workload's own warm-up (weights, cuBLAS
    heuristics, first allocation) is over and the daemon's window covers only the workload."""
    def close(sample: dict[str, Any]) -> bool:
        daemon = sample.get("daemon") or {}
        for key in STEADY_SIGNALS:
            want, got = medians.get(key), daemon.get(key)
            if want is not None and (got is None or abs(got - want) > tolerance):
                return False
        want, got = medians.get(MEMORY_USED), daemon.get(MEMORY_USED)
        return want is None or (got is not None and abs(got - want) <= tolerance * want)

    start = None
    for sample in samples:
        held = close(sample)
        if held and start is None:
            start = sample["t"]
        elif not held:
            start = None  # must hold from here to the end of the run
    return start


def windows_from_steady(changes: list[list[Any]], regimes: list[tuple[float, str]],
                        good: set[str], start: float | None, interval: float) -> int | None:
    """Whole windows from steady state until the daemon first says a ``good`` regime; 0 when
    it already said so (a regime entered during warm-up counts from there)."""
    if start is None:
        return None
    timeline = [(rel, regime) for rel, regime in changes] if changes else regimes
    current = None
    for rel, regime in timeline:
        if rel <= start:
            current = regime
            continue
        if current in good:
            return 0
        if regime in good:
            return max(0, math.ceil((rel - start) / interval - 1e-6))
        current = regime
    return 0 if current in good else None


def summarize(
    samples: list[dict[str, Any]],
    expected: str,
    acceptable: Iterable[str] = (),
    drop: float = 5.0,
    interval: float = 1.0,
    changes: list[list[Any]] | None = None,
) -> dict[str, Any]:
    """Steady-state medians (samples with ``t >= drop``), regime sequence and timing.

    ``windows_to_regime`` counts daemon windows from the workload's ready moment (t=0) to the
    expected (or an acceptable) regime: from the daemon's own ``regime_changed`` log lines when
    given (exact), else from the first 1 s sample showing it (up to one window late).
    ``regime_share`` is the share of steady samples that show it.
    """
    good = {expected, *acceptable}
    steady = [s for s in samples if s["t"] >= drop]
    # A workload whose warm-up outlasts ``drop`` (weights initialised on the GPU, first
    # prefill) would bias the medians and rates: keep only samples from steady state on.
    first_pass = {k: median((s.get("daemon") or {}).get(k) for s in steady)
                  for k in (*STEADY_SIGNALS, MEMORY_USED)}
    start = steady_start(samples, first_pass)
    if start is not None and start > drop:
        steady = [s for s in samples if s["t"] >= start] or steady
    regimes = [(s["t"], (active_label(s.get("daemon") or {}, "goodput_gpu_regime", "regime")
                         or ["none"])[0]) for s in samples]
    first = next((t for t, r in regimes if r in good), None)
    steady_regimes = [r for t, r in regimes if t >= max(drop, start or drop)]
    keys = sorted({k for s in steady for k in (s.get("daemon") or {})})
    smi_keys = sorted({k for s in steady for k in (s.get("smi") or {})})
    flags: dict[str, float] = {}
    for reason in ("hollow_busy", "busy_no_output"):
        key = f"goodput_gpu_busy_unproductive{{reason={reason}}}"
        vals = [s["daemon"][key] for s in steady if key in (s.get("daemon") or {})]
        if vals:
            flags[reason] = sum(1 for v in vals if v >= 0.5) / len(vals)
    daemon_medians = {k: median((s.get("daemon") or {}).get(k) for s in steady) for k in keys}
    return {
        "samples": len(samples),
        "steady_samples": len(steady),
        "steady_start": start,
        "windows_from_steady": windows_from_steady(changes or [], regimes, good, start, interval),
        "daemon_medians": daemon_medians,
        "smi_medians": {k: median((s.get("smi") or {}).get(k) for s in steady)
                        for k in smi_keys},
        "regime_sequence": run_lengths(r for _, r in regimes),
        "steady_regime": (statistics.mode(steady_regimes) if steady_regimes else None),
        "windows_to_regime": (
            log_windows_to_regime(changes, good, interval) if changes
            else None if first is None else max(0, round(first / interval))),
        "windows_to_regime_source": "daemon log" if changes else "samples",
        "regime_changes": changes or [],
        "regime_share": (sum(1 for r in steady_regimes if r in good) / len(steady_regimes)
                         if steady_regimes else None),
        "busy_unproductive_share": flags,
        "tokens_per_second": _gen_rate(steady),
        "engine_tokens_per_second": counter_rate(steady, "vllm", "vllm:generation_tokens_total"),
        "engine_prompt_tokens_per_second": counter_rate(steady, "vllm",
                                                        "vllm:prompt_tokens_total"),
        "energy_watts": counter_rate(steady, "daemon", "goodput_gpu_energy_joules_total"),
    }


def _gen_rate(samples: list[dict[str, Any]]) -> float | None:
    """Generation-token rate from the daemon's attributed counters (kind=generation only)."""
    rows = []
    for s in samples:
        vals = [v for k, v in (s.get("daemon") or {}).items()
                if k.startswith("goodput_gpu_tokens_total{") and "kind=generation" in k]
        if vals:
            rows.append({"t": s["t"], "x": {"gen": sum(vals)}})
    return counter_rate(rows, "x", "gen")


def gpu_kind(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100``; anything else -> a slug of the name."""
    match = re.search(r"\b([A-Z]\d{2,4})\b", name.upper())
    if match:
        return match.group(1).lower()
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def log_support(lines: Iterable[str]) -> dict[str, Any]:
    """What the daemon's JSON log says about support: unsupported NVML readings, unsupported
    GPM metric ids, GPM support per GPU, and every distinct event name seen."""
    nvml: dict[str, set[str]] = {}
    gpm_ids: set[int] = set()
    gpm_support: dict[str, Any] = {}
    events: dict[str, int] = {}
    errors: list[dict[str, Any]] = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        event = str(rec.get("event", ""))
        events[event] = events.get(event, 0) + 1
        if event == "nvml_metric_unsupported":
            nvml.setdefault(str(rec.get("gpu", "")), set()).add(str(rec.get("metric", "")))
        elif event == "gpm_metrics_unsupported":
            gpm_ids.update(int(i) for i in rec.get("metric_ids") or [])
        elif event == "gpm_support":
            gpm_support[str(rec.get("gpu", ""))] = {"supported": rec.get("supported"),
                                                    "reason": rec.get("reason", "")}
        if rec.get("level") in ("error", "critical") and len(errors) < 50:
            errors.append(rec)
    return {
        "nvml_unsupported": {g: sorted(m) for g, m in nvml.items()},
        "gpm_unsupported_ids": sorted(gpm_ids),
        "gpm_support": gpm_support,
        "log_events": events,
        "log_errors": errors,
    }
