"""The real-GPU harness without a GPU: its pure helpers and the report from a synthetic run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.gpu import gpu_validation as gv
from bench.gpu import report

EXPOSITION = """\
# HELP goodput_gpu_utilization_ratio x
# TYPE goodput_gpu_utilization_ratio gauge
goodput_gpu_utilization_ratio{gpu="0",uuid="GPU-a",node="n"} 0.99
goodput_gpu_utilization_ratio{gpu="1",uuid="GPU-b",node="n"} 0.10
# HELP goodput_gpu_regime x
# TYPE goodput_gpu_regime gauge
goodput_gpu_regime{gpu="0",uuid="GPU-a",node="n",regime="compute_bound"} 1
goodput_gpu_regime{gpu="0",uuid="GPU-a",node="n",regime="idle"} 0
# HELP goodput_exporter_poll_duration_seconds x
# TYPE goodput_exporter_poll_duration_seconds histogram
goodput_exporter_poll_duration_seconds_bucket{node="n",source="nvml",le="+Inf"} 4
goodput_exporter_poll_duration_seconds_sum{node="n",source="nvml"} 0.02
goodput_exporter_poll_duration_seconds_count{node="n",source="nvml"} 4
"""


def test_parse_exposition_splits_device_and_node_series() -> None:
    device, node = gv.parse_exposition(EXPOSITION, "0")
    assert device["goodput_gpu_utilization_ratio"] == 0.99
    assert device["goodput_gpu_regime{regime=compute_bound}"] == 1.0
    assert gv.active_label(device, "goodput_gpu_regime", "regime") == ["compute_bound"]
    assert node["goodput_exporter_poll_duration_seconds_count{source=nvml}"] == 4.0
    assert not any(k.endswith("_bucket") or "_bucket{" in k for k in node)


def _samples(regimes: list[str], util: float, flag: float = 0.0) -> list[dict[str, Any]]:
    out = []
    for i, regime in enumerate(regimes):
        daemon = {
            "goodput_gpu_utilization_ratio": util,
            "goodput_gpu_sm_active_ratio": 0.9,
            "goodput_gpu_power_watts": 600.0,
            "goodput_gpu_energy_joules_total": 1000.0 + 600.0 * i,
            f"goodput_gpu_regime{{regime={regime}}}": 1.0,
            "goodput_gpu_busy_unproductive{reason=hollow_busy}": flag,
            "goodput_gpu_tokens_total{engine=vllm,kind=generation,model=m}": 100.0 * i,
            "goodput_gpu_tokens_total{engine=vllm,kind=prompt,model=m}": 999.0 * i,
        }
        out.append({"t": float(i), "daemon": daemon, "smi": {"utilization.gpu": util * 100},
                    "vllm": {"vllm:generation_tokens_total": 100.0 * i}})
    return out


def test_summarize_counts_windows_to_regime_and_rates() -> None:
    samples = _samples(["unknown", "unknown", "compute_bound"] + ["compute_bound"] * 8, 0.99)
    s = gv.summarize(samples, "compute_bound", drop=3)
    assert s["windows_to_regime"] == 2
    assert s["steady_regime"] == "compute_bound"
    assert s["regime_share"] == 1.0
    assert s["regime_sequence"] == [["unknown", 2], ["compute_bound", 9]]
    assert s["daemon_medians"]["goodput_gpu_utilization_ratio"] == 0.99
    assert s["tokens_per_second"] == 100.0  # generation only, prompt tokens left out
    assert s["engine_tokens_per_second"] == 100.0
    assert s["energy_watts"] == 600.0
    assert s["busy_unproductive_share"] == {"hollow_busy": 0.0}


def test_summarize_without_any_regime_series() -> None:
    samples = [{"t": float(i), "daemon": {"goodput_gpu_utilization_ratio": 0.5}} for i in range(8)]
    s = gv.summarize(samples, "idle")
    assert s["windows_to_regime"] is None
    assert s["steady_regime"] == "none"


def test_log_support_reads_unsupported_readings() -> None:
    lines = [
        json.dumps({"event": "nvml_metric_unsupported", "gpu": "0", "metric": "ecc"}),
        json.dumps({"event": "gpm_metrics_unsupported", "metric_ids": [60, 61]}),
        json.dumps({"event": "gpm_support", "gpu": "0", "supported": True, "reason": ""}),
        json.dumps({"event": "gpu_down", "level": "error", "gpu": "0"}),
        "# --- phase hardware: not json",
    ]
    out = gv.log_support(lines)
    assert out["nvml_unsupported"] == {"0": ["ecc"]}
    assert out["gpm_unsupported_ids"] == [60, 61]
    assert out["gpm_support"]["0"]["supported"] is True
    assert out["log_errors"][0]["event"] == "gpu_down"


def test_small_helpers() -> None:
    assert gv.gpu_kind("NVIDIA H100 80GB HBM3") == "h100"
    assert gv.gpu_kind("NVIDIA H200") == "h200"
    assert gv.parse_smi_csv("97, 40, 612.3, 1024, 1980\n", gv.SMI_FIELDS[:5]) == {
        "utilization.gpu": 97.0, "utilization.memory": 40.0, "power.draw": 612.3,
        "memory.used": 1024.0, "clocks.sm": 1980.0}
    assert gv.parse_smi_csv("[N/A], 1\n", ["a", "b"]) == {"b": 1.0}
    assert gv.series_key("x", {"gpu": "0", "b": "2", "a": "1"}) == "x{a=1,b=2}"


def _validation() -> dict[str, Any]:
    def entry(name: str, regimes: list[str], util: float, flag: float = 0.0) -> dict[str, Any]:
        expected, acceptable, unproductive = gv.EXPECTED[name]
        samples = _samples(regimes, util, flag)
        return {
            "description": gv.DESCRIPTIONS[name], "expected": expected,
            "acceptable": list(acceptable), "expect_unproductive": unproductive, "gpu": "0",
            "status": "ok", "samples": samples,
            "info": {"torch": "2.11.0", "cuda": "13.0", "device": "NVIDIA H100 80GB HBM3",
                     "model": "bench-decoder", "params": 4.7e9, "flops_per_token": 9.4e9},
            "stats": {"tflops": 700.0},
            "daemon_cpu_percent_with_scrapes": 1.5,
            "summary": gv.summarize(samples, expected, acceptable, drop=2),
        }

    return {
        "schema": 1, "started": "2026-01-01T00:00:00+00:00", "finished": "later",
        "complete": True, "simulate": False, "elapsed_seconds": 300.0,
        "args": {"seconds": 25, "interval": 1.0, "drop": 5},
        "host": {"python": "3.12.3", "nvidia_ml_py": "13.580", "cpus": 16},
        "gpu": {"name": "NVIDIA H100 80GB HBM3", "driver_version": "580.159.04",
                "memory.total": 81559.0, "power.limit": 700.0, "count": 1},
        "daemon": {"phases": [{"phase": "hardware", "rss_end": {"VmRSS": 60 * 2**20}}]},
        "poll_cost": {"quiet_seconds": 15.0, "interval_seconds": 1.0, "gpus": 1,
                      "cpu_seconds": 0.06, "cpu_percent_of_core_per_gpu": 0.4,
                      "rss": {"VmRSS": 58 * 2**20, "VmHWM": 59 * 2**20},
                      "poll_duration": {"nvml": {"count": 15, "sum": 0.03,
                                                 "mean_seconds": 0.002, "count_total": 20}}},
        "support": {"nvml_unsupported": {"0": ["ecc"]}, "gpm_unsupported_ids": [60, 61],
                    "gpm_support": {"0": {"supported": True, "reason": ""}},
                    "families_gpu0": ["goodput_gpu_utilization_ratio", "goodput_gpu_power_watts"],
                    "profiling_available": {"goodput_gpu_profiling_available{reason=,source=gpm}":
                                            1.0},
                    "log_errors": []},
        "workloads": {
            "large_gemm": entry("large_gemm", ["unknown"] + ["compute_bound"] * 9, 0.99),
            "tiny_kernels": entry("tiny_kernels", ["launch_bound"] * 10, 0.98, flag=1.0),
            "hbm_copy": entry("hbm_copy", ["compute_bound"] * 10, 0.99),
            "transformer_decode": entry("transformer_decode", ["memory_bound"] * 10, 0.95),
            "small_gemm_sync": {"status": "error", "error": "RuntimeError: boom",
                                "expected": "host_bound", "samples": []},
        },
    }


def test_report_writes_both_files_named_after_the_gpu(tmp_path: Path) -> None:
    src = tmp_path / "validation.json"
    src.write_text(json.dumps(_validation()))
    assert report.main([str(src), "--out-dir", str(tmp_path / "docs")]) == 0
    core = (tmp_path / "docs" / "core-h100.md").read_text()
    eff = (tmp_path / "docs" / "efficiency-h100.md").read_text()

    assert "NVIDIA H100 80GB HBM3" in core
    assert "| `goodput_gpu_utilization_ratio` | kernel-time utilization | worked |" in core
    assert "| `goodput_gpu_temperature_celsius` | temperature | absent |" in core
    assert "`ecc`" in core
    assert "| 60 | nvlink rx | unsupported |" in core and "| 2 | sm_active | worked |" in core
    assert "| large_gemm | ok | 99 / 99 |" in core
    assert "**0.400 % of one core per GPU** (target: under 1 %: met)" in core
    assert "small_gemm_sync`: error: RuntimeError: boom" in core

    assert "| large_gemm | compute_bound | compute_bound | 1 | 1 | 1.00 | none | pass |" in eff
    tiny = "| tiny_kernels | launch_bound | launch_bound | 0 | 0 | 1.00 | hollow_busy 1.00 | pass |"
    assert tiny in eff
    hbm = "| hbm_copy | memory_bound | compute_bound | — | — | 0.00 | none | FAIL (regime) |"
    assert hbm in eff
    assert "joules per token" in eff and "| generation tokens/s | 100 | 100 |" in eff
    assert "`large_gemm`: unknown x1 → compute_bound x9" in eff


def test_report_rejects_unreadable_input(tmp_path: Path) -> None:
    bad = tmp_path / "v.json"
    bad.write_text("{not json")
    assert report.main([str(bad), "--out-dir", str(tmp_path)]) == 2


def test_windows_to_regime_from_the_daemon_log() -> None:
    ready = 1_800_000_000.0

    def line(offset: float, regime: str, gpu: str = "0") -> str:
        stamp = datetime.fromtimestamp(ready + offset, UTC).isoformat()
        return json.dumps({"event": "regime_changed", "gpu": gpu, "regime": regime,
                           "timestamp": stamp.replace("+00:00", "Z")})

    lines = [line(-9, "idle"), line(-2, "compute_bound"), line(0.4, "unknown"),
             line(1.5, "other", gpu="1"), line(2.7, "memory_bound"), "not json"]
    changes = gv.regime_changes(lines, "0", ready)
    assert changes == [[0.0, "compute_bound"], [0.4, "unknown"], [2.7, "memory_bound"]]
    assert gv.log_windows_to_regime(changes, {"memory_bound"}, 1.0) == 3
    assert gv.log_windows_to_regime(changes, {"compute_bound"}, 1.0) == 0
    assert gv.log_windows_to_regime(changes, {"idle"}, 1.0) is None
    samples = _samples(["unknown"] * 5 + ["memory_bound"] * 5, 0.9)
    s = gv.summarize(samples, "memory_bound", drop=3, changes=changes)
    assert s["windows_to_regime"] == 3 and s["windows_to_regime_source"] == "daemon log"


def test_windows_are_counted_from_steady_state() -> None:
    from bench.gpu import gpu_validation as gv

    def sample(t: float, sm: float, regime: str) -> dict:
        return {"t": t, "daemon": {"goodput_gpu_sm_active_ratio": sm,
                                   f"goodput_gpu_regime{{regime={regime}}}": 1.0}}

    # warm-up at 0.1 for 5 s, steady at 0.9 from t=5, regime follows 2 windows later
    samples = [sample(t, 0.1 if t < 5 else 0.9, "idle" if t < 7 else "compute_bound")
               for t in range(20)]
    summary = gv.summarize(samples, "compute_bound", drop=8.0)
    assert summary["steady_start"] == 5
    assert summary["windows_from_steady"] == 2
    assert summary["windows_to_regime"] == 7


JOBS = """\
# TYPE goodput_job_gpus gauge
goodput_job_gpus{node="n",namespace="bench",job_source="kubernetes",job_id="allreduce-0"} 2
goodput_job_gpus{node="n",namespace="ml",job_source="kubernetes",job_id="other"} 4
# TYPE goodput_job_straggler gauge
goodput_job_straggler{node="n",namespace="bench",job_id="allreduce-0",gpu="1"} 1
# TYPE goodput_gpu_utilization_ratio gauge
goodput_gpu_utilization_ratio{gpu="1",uuid="GPU-b",node="n"} 0.99
"""


def test_job_state_reads_job_sizes_and_stragglers() -> None:
    from bench.gpu import analysis

    assert analysis.job_state(JOBS) == {
        "bench/allreduce-0": {"gpus": 2.0, "stragglers": ["1"]},
        "ml/other": {"gpus": 4.0, "stragglers": []},
    }
    assert analysis.job_state(EXPOSITION) == {}  # no pod attribution: no job series at all
