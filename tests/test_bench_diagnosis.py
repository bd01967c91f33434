"""bench/gpu/diagnosis.py and bench/footprint/side_by_side.py without a GPU: their pure
helpers, and the whole diagnosis pipeline on the simulated daemon with dry-run workloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.footprint import side_by_side
from bench.gpu import diagnosis

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


def _job_windows(stragglers: list[list[str]], regimes: dict[str, list[str]],
                 flags: dict[str, list[list[str]]] | None = None,
                 grouped: bool = True) -> list[dict[str, object]]:
    """Synthetic job_window records: per window the named GPUs, each GPU's regime and flags."""
    out = []
    for i, named in enumerate(stragglers):
        rows = {g: {"regime": seq[i], "unproductive": (flags or {}).get(g, [[]] * len(seq))[i]}
                for g, seq in regimes.items()}
        state = {"bench/allreduce-0": {"gpus": 2.0 if grouped else 1.0, "stragglers": named}}
        out.append(diagnosis.job_window(float(i), "bench/allreduce-0", state, rows))
    return out


def test_job_check_straggler_must_be_the_slowed_ranks_gpu() -> None:
    regimes = {"0": ["compute_bound", "comm_wait", "comm_wait", "comm_wait", "comm_wait"],
               "1": ["compute_bound"] * 5}
    windows = _job_windows([[], ["1"], ["1"], ["1"], []], regimes)
    job = diagnosis.job_summary(windows, ["0", "1"], "1", drop=1)
    assert job["windows"] == 4 and job["grouped_windows"] == 4
    assert job["straggler_windows"] == {"1": 3}
    assert job["comm_wait_windows"] == {"0": 4, "1": 0}
    assert job["straggler_sequence"] == [["-", 1], ["1", 3], ["-", 1]]
    assert job["check"]["ok"] is True
    assert "named in 3/4" in job["check"]["why"] and "comm_wait: GPU 0 4/4" in job["check"]["why"]
    # the wrong GPU named, even once, fails; so does the right one in under half the windows
    wrong = diagnosis.job_summary(_job_windows([["1"], ["0"], ["1"]], {"0": ["comm_wait"] * 3}),
                                  ["0", "1"], "1", drop=0)
    assert wrong["check"]["ok"] is False and "other GPUs named: 0 x1" in wrong["check"]["why"]
    rare = diagnosis.job_summary(_job_windows([["1"], [], [], []], {"0": ["idle"] * 4}),
                                 ["0", "1"], "1", drop=0)
    assert rare["check"]["ok"] is False


def test_job_check_balanced_needs_no_straggler_no_flags_and_a_grouped_job() -> None:
    regimes = {"0": ["compute_bound"] * 3, "1": ["compute_bound"] * 3}
    ok = diagnosis.job_summary(_job_windows([[], [], []], regimes), ["0", "1"], None, drop=0)
    assert ok["check"] == {"ok": True, "why": "0 straggler windows (none), 0 busy-unproductive "
                                              "GPU-windows, in 3 windows"}
    flagged = diagnosis.job_summary(
        _job_windows([[], [], []], regimes, flags={"1": [[], ["hollow_busy"], []]}),
        ["0", "1"], None, drop=0)
    assert flagged["unproductive_windows"] == {"0": 0, "1": 1} and not flagged["check"]["ok"]
    named = diagnosis.job_summary(_job_windows([[], ["0"], []], regimes), ["0", "1"], None, 0)
    assert not named["check"]["ok"] and "GPU 0 x1" in named["check"]["why"]
    # no pod attribution: no straggler is no evidence, so the check fails and says why
    alone = diagnosis.job_summary(_job_windows([[], [], []], regimes, grouped=False),
                                  ["0", "1"], None, drop=0)
    assert not alone["check"]["ok"] and "pod attribution missing" in alone["check"]["why"]
    assert not diagnosis.job_summary([], ["0", "1"], None, drop=0)["check"]["ok"]


def test_markdown_shows_the_job_column_and_check() -> None:
    windows = _job_windows([["1"], ["1"]], {"0": ["comm_wait"] * 2, "1": ["compute_bound"] * 2})
    job = diagnosis.job_summary(windows, ["0", "1"], "1", drop=0)
    rows = [{**diagnosis.window_row(_device(1.0, 1.0), None, None), "t": 0.0, "gpu": g,
             "straggler": g == "1"} for g in ("0", "1")]
    summary = {g: diagnosis.summarize_rows([r], 0) for g, r in zip(("0", "1"), rows, strict=True)}
    result = {"gpu": {"name": "X", "count": 2}, "args": {"drop": 0},
              "pods": {"pods": {"bench/allreduce-0/trainer": ["GPU-a", "GPU-b"]}, "list_calls": 3},
              "workloads": {"allreduce_straggler": {"status": "ok", "expert": "x", "job": job,
                                                    "summary": summary, "windows": rows}}}
    md = diagnosis.markdown(result)
    assert "| straggler 0/2, comm_wait 2/2 |" in md and "| straggler 2/2, comm_wait 0/2 |" in md
    assert "**allreduce_straggler job check: PASS**" in md and "3 List calls" in md
    assert "| yes |" in md  # the per-window table marks the named GPU


def test_expected_straggler_follows_the_ranks_device_uuid(tmp_path: Path) -> None:
    import argparse

    args = argparse.Namespace(out=str(tmp_path), simulate=False)
    run = diagnosis.Diagnosis(args)
    try:
        run.result["gpu"] = {"count": 2, "all": [{"uuid": "GPU-aaaa"}, {"uuid": "GPU-bbbb"}]}
        # torch gives the UUID without "GPU-"; rank 1 is on NVML index 0 here
        info = {"straggler_rank": 1, "devices": [{"uuid": "bbbb"}, {"uuid": "aaaa"}]}
        assert run.expected_straggler("allreduce_straggler", ["0", "1"], info) == "0"
        assert run.expected_straggler("allreduce_straggler", ["0", "1"], {}) == "1"
        assert run.expected_straggler("allreduce_balanced", ["0", "1"],
                                      {"straggler_rank": None}) is None
    finally:
        run.log.close()


def test_diagnosis_pipeline_judges_the_simulated_ranks_as_one_job(tmp_path: Path) -> None:
    """--simulate on 2 GPUs: the kubelet stand-in serves the ranks' pods, the daemon names the
    simulated straggler (GPU 2, rank 1) and nothing on the balanced pair."""
    # a straggler is named once it has held 10 s: windows from 11 s on are judged
    rc = diagnosis.main(["--simulate", "--out", str(tmp_path), "--seconds", "15", "--settle",
                         "1", "--drop", "11", "--gpus", "2",
                         "--workloads", "allreduce_straggler,allreduce_balanced"])
    assert rc == 0
    result = json.loads((tmp_path / "diagnosis.json").read_text())
    assert "--kubernetes" in result["daemon_command"] and result["pods"]["list_calls"] > 0
    assert not Path(result["pods"]["socket"]).parent.exists()  # the stand-in cleaned up
    straggler = result["workloads"]["allreduce_straggler"]
    assert straggler["rank_gpus"] == ["10", "2"]
    assert straggler["job"]["expected_straggler"] == "2"
    assert straggler["job"]["check"]["ok"], straggler["job"]
    assert straggler["job"]["straggler_windows"].keys() == {"2"}
    balanced = result["workloads"]["allreduce_balanced"]["job"]
    assert balanced["check"]["ok"] and balanced["grouped_windows"] > 0, balanced
    assert result["job_checks"]["allreduce_balanced"]["ok"]
    assert "job check: PASS" in (tmp_path / "diagnosis.md").read_text()


def test_without_grpcio_the_run_goes_on_and_the_job_check_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_grpc(*_: object, **__: object) -> None:
        raise ModuleNotFoundError("No module named 'grpc'")

    monkeypatch.setattr(diagnosis, "PodResourcesStandIn", no_grpc)
    rc = diagnosis.main(["--simulate", "--out", str(tmp_path), "--seconds", "2", "--settle",
                         "0.2", "--drop", "0", "--gpus", "2", "--workloads", "allreduce_balanced"])
    assert rc == 0
    result = json.loads((tmp_path / "diagnosis.json").read_text())
    assert "No module named 'grpc'" in result["pods"]["error"]
    assert "--kubernetes" not in result["daemon_command"]
    job = result["workloads"]["allreduce_balanced"]["job"]
    assert job["windows"] > 0 and job["grouped_windows"] == 0
    assert not job["check"]["ok"] and "pod attribution missing" in job["check"]["why"]
