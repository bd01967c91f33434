"""bench/diagnosis.py and bench/side_by_side.py without a GPU: their pure helpers, and the
whole diagnosis pipeline on the simulated daemon with dry-run workloads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import diagnosis  # noqa: E402  (bench/ is a script folder, not a package)
import side_by_side  # noqa: E402

EXPOSITION = """\
# TYPE goodput_gpu_utilization_ratio gauge
goodput_gpu_utilization_ratio{gpu="0",uuid="GPU-a"} 1.0
# TYPE goodput_gpu_sm_active_seconds_total counter
goodput_gpu_sm_active_seconds_total{gpu="0",uuid="GPU-a"} %s
# TYPE goodput_gpu_pcie_bytes_per_second gauge
goodput_gpu_pcie_bytes_per_second{gpu="0",direction="rx"} 5.5e10
goodput_gpu_pcie_bytes_per_second{gpu="0",direction="tx"} 1e6
# TYPE goodput_gpu_regime gauge
goodput_gpu_regime{gpu="0",regime="transfer_bound"} 1
goodput_gpu_regime{gpu="0",regime="allocated_idle"} 0
# TYPE goodput_gpu_busy_unproductive gauge
goodput_gpu_busy_unproductive{gpu="0",reason="hollow_busy"} 1
# TYPE goodput_gpu_regime_seconds_total counter
goodput_gpu_regime_seconds_total{gpu="0",regime="transfer_bound"} %s
goodput_gpu_regime_seconds_total{gpu="0",regime="idle"} 3
"""


def _device(sm: float, transfer: float) -> dict[str, float]:
    device, _ = diagnosis.parse_exposition(EXPOSITION % (sm, transfer), "0")
    return device


def test_window_row_reads_gauges_and_falls_back_to_counter_rates() -> None:
    prev, cur = _device(10.0, 4.0), _device(10.5, 5.0)
    row = diagnosis.window_row(cur, prev, 1.0)
    assert row["util"] == 1.0
    assert row["sm_active"] == 0.5  # no gauge: the counter's rate
    assert row["pcie_rx_Bps"] == 5.5e10 and row["pcie_tx_Bps"] == 1e6
    assert row["nvlink_rx_Bps"] is None
    assert row["regime"] == "transfer_bound"
    assert row["unproductive"] == ["hollow_busy"]
    assert row["regime_seconds_delta"] == {"transfer_bound": 1.0}
    first = diagnosis.window_row(prev, None, None)
    assert first["sm_active"] is None and "regime_seconds_delta" not in first


def test_summary_and_markdown() -> None:
    rows = [diagnosis.window_row(_device(float(i), float(i)), _device(i - 1.0, i - 1.0), 1.0)
            for i in range(1, 6)]
    s = diagnosis.summarize_rows(rows, drop=1)
    assert s["windows"] == 5 and s["sm_active"] == 1.0
    assert s["regimes"] == [["transfer_bound", 5]]
    assert s["unproductive_share"] == {"hollow_busy": 1.0}
    assert s["regime_seconds_share"] == {"transfer_bound": 1.0}
    result = {"gpu": {"name": "X", "count": 1}, "args": {"drop": 1}, "workloads": {
        "h2d": {"status": "ok", "expert": "transfer_bound", "summary": {"0": s},
                "windows": [{**r, "t": i, "gpu": "0"} for i, r in enumerate(rows)]},
        "standin_wait": {"status": "skipped", "error": "budget", "stand_in": True}}}
    md = diagnosis.markdown(result)
    assert "| h2d | 0 | ok | 5 |" in md and "transfer_bound x5" in md
    assert "standin_wait (STAND-IN)" in md


def test_side_by_side_helpers() -> None:
    assert side_by_side.parse_phases("1:90,15:90") == [(1.0, 90.0), (15.0, 90.0)]
    assert side_by_side.percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert side_by_side.percentile([], 50) is None
    series, families = side_by_side.count_series(EXPOSITION % (1, 1))
    assert (series, families) == (9, 6)


def test_diagnosis_pipeline_on_the_simulated_node(tmp_path: Path) -> None:
    rc = diagnosis.main(["--simulate", "--out", str(tmp_path), "--seconds", "2", "--settle",
                         "0.2", "--drop", "0", "--gpus", "1",
                         "--workloads", "h2d,standin_wait,allreduce_balanced"])
    assert rc == 0
    result = json.loads((tmp_path / "diagnosis.json").read_text())
    work = result["workloads"]
    assert work["h2d"]["status"] == "ok" and len(work["h2d"]["windows"]) >= 2
    assert work["h2d"]["windows"][-1]["regime"]
    assert work["standin_wait"]["stand_in"] is True
    assert work["allreduce_balanced"]["status"] == "skipped"  # needs 2 GPUs, 1 here
    assert "STAND-IN" in (tmp_path / "diagnosis.md").read_text()


def test_plan_order_and_rows_fit_the_budget(tmp_path: Path) -> None:
    import argparse

    args = argparse.Namespace(out=str(tmp_path), seconds=25.0, min_seconds=12.0, settle=3.0,
                              budget=250.0, bursts="3:1,3,8", gap=6.0, workloads="",
                              llama_url="http://x", simulate=True)
    run = diagnosis.Diagnosis(args)
    try:
        assert run.plan(2)[:2] == ["allreduce_straggler", "allreduce_balanced"]
        one = run.plan(1)
        assert one.index("serving") < one.index("standin_wait") and "allreduce_balanced" not in one
        # 6 timed rows at 14 s overhead each, serving 38 s + 14: (250 - 52 - 84) / 6 = 19 s
        assert 18.0 < run.row_seconds(one, 1) < 19.5
        args.budget = 100.0
        assert run.row_seconds(one, 1) == 12.0
        args.seconds = 5.0
        assert run.row_seconds(one, 1) == 5.0
    finally:
        run.log.close()
