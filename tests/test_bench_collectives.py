"""The [split] bench's collective counts without a GPU: each window's rate of the exporter's
goodput_gpu_collectives_total, the ranks' own count at each launch, and the report that sets
one beside the other (issue 46: latency-bound all-reduces checked against NCCL's count)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from bench.gpu import split
from bench.gpu.jobs import BEFORE
from bench.gpu.split import (
    PARTS,
    PLANS,
    add_rates,
    counter_rate,
    fixture,
    main,
    nccl_seen,
    parts,
    plan_seconds,
    render_collectives,
    scrape_more,
)
from bench.gpu.workloads.counted import CountedDist, aside
from bench.gpu.workloads.jobs import Timer
from bench.gpu.workloads.split import Job


class FakeDist:
    """torch.distributed's calls the workloads make, each noted by name."""

    class ReduceOp:
        MAX = "max"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return [] if name == "batch_isend_irecv" else None

        return call

    def P2POp(self, *args: Any) -> tuple[Any, ...]:  # torch's name
        return args


# --- the exporter's side: a rate per window -------------------------------------------------

def test_a_window_rate_is_the_counters_increase_per_second() -> None:
    assert counter_rate(100.0, 10.0, 4600.0, 11.0) == pytest.approx(4500.0)
    assert counter_rate(100.0, 10.0, 1100.0, 12.0) == pytest.approx(500.0)


def test_a_decrease_is_a_reset_and_the_new_value_is_the_increase() -> None:
    assert counter_rate(9000.0, 10.0, 300.0, 11.0) == pytest.approx(300.0)


def test_no_rate_without_the_series_on_both_scrapes_or_without_time() -> None:
    assert counter_rate(None, 10.0, 300.0, 11.0) is None
    assert counter_rate(300.0, 10.0, None, 11.0) is None
    assert counter_rate(300.0, 11.0, 400.0, 11.0) is None


METRICS = """# HELP goodput_gpu_collectives_total NCCL collectives launched on the GPU.
# TYPE goodput_gpu_collectives_total counter
goodput_gpu_collectives_total{gpu="0"} %s
goodput_gpu_collectives_total{gpu="1"} %s
# HELP goodput_gpu_utilization_ratio Utilization.
# TYPE goodput_gpu_utilization_ratio gauge
goodput_gpu_utilization_ratio{gpu="0"} 0.5
goodput_gpu_utilization_ratio{gpu="1"} 0.5
goodput_gpu_utilization_ratio{gpu="2"} 0.0
"""


def _window(t: float, zero: float, one: float) -> dict[str, Any]:
    return {"t_unix": t, **scrape_more(METRICS % (zero, one))}


def test_each_scrape_carries_each_gpus_collectives_per_second() -> None:
    """GPU 0 at 4,500 a second, GPU 1's job restarted between the 2nd and 3rd scrape,
    GPU 2 with no series at all."""
    w = [_window(100.0, 1000, 50), _window(101.0, 5500, 2050), _window(102.5, 12250, 30)]
    prev = None
    for window in w:
        add_rates(prev, window)
        prev = window
    assert w[0]["gpus"]["0"]["collectives"] is None  # the first scrape: no rate yet
    assert w[1]["gpus"]["0"]["collectives"] == pytest.approx(4500.0)
    assert w[2]["gpus"]["0"]["collectives"] == pytest.approx(4500.0)
    assert w[1]["gpus"]["1"]["collectives"] == pytest.approx(2000.0)
    assert w[2]["gpus"]["1"]["collectives"] == pytest.approx(20.0)  # reset: 30 in 1.5 s
    assert w[2]["gpus"]["2"]["collectives"] is None
    assert w[2]["gpus"]["0"]["collectives_total"] == 12250


def test_the_fixture_keeps_the_windows_collectives() -> None:
    result = {"rows": {"r": {"gpus": ["0"], "skip": 4.0, "windows": [
        {"t": 5.0, "t_unix": 1.0, "poll_unix": 0.9,
         "gpus": {"0": {"collectives": 4500.0, "collectives_total": 9000.0, "regime": "x"}}}]}}}
    got = fixture(result, "test")["rows"]["r"]["windows"][0]["gpus"]["0"]
    assert got == {"collectives": 4500.0, "collectives_total": 9000.0}


# --- the ranks' side: counted where they are launched ---------------------------------------

def test_each_collective_call_counts_once_and_point_to_point_not_at_all() -> None:
    raw = FakeDist()
    dist = CountedDist(raw)
    dist.all_reduce("t")
    dist.all_gather_into_tensor("a", "b")
    dist.reduce_scatter_tensor("a", "b")
    dist.broadcast("t", src=0)
    dist.barrier()  # torch's NCCL group runs it as an all-reduce
    dist.send("t", 1)
    dist.batch_isend_irecv([dist.P2POp(dist.isend, "t", 1)])
    assert dist.ReduceOp.MAX == "max"
    assert (dist.total, dist.steps) == (5, 5)
    assert raw.calls == ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
                         "broadcast", "barrier", "send", "batch_isend_irecv"]


def test_timings_between_steps_count_for_nccl_but_not_for_the_steps() -> None:
    dist = CountedDist(FakeDist())
    dist.all_reduce("t")
    with dist.aside():
        dist.barrier()
        with aside(dist):
            dist.all_reduce("t")
    dist.all_reduce("t")
    assert (dist.total, dist.steps) == (4, 2)
    with aside(FakeDist()):  # a dist that does not count: nothing to set aside
        pass


def _job(coll: str) -> tuple[Job, CountedDist]:
    """A split_job rank with its tensors stood in: only what a step's collective touches."""
    job = object.__new__(Job)
    dist = CountedDist(FakeDist())
    job.dist, job.rank, job.world = dist, 0, 2
    job.args = argparse.Namespace(coll=coll, ckpt_every_s=0.0)
    job.full = job.part = job.recv = job.tiny = "tensor"
    return job, dist


@pytest.mark.parametrize(("coll", "counted"), [
    ("all_reduce", 1), ("all_gather", 1), ("reduce_scatter", 1), ("broadcast", 1),
    ("tiny", 1), ("sendrecv", 0), ("none", 0)])
def test_a_split_job_rounds_collective_is_one_nccl_collective_but_an_exchange(
    coll: str, counted: int
) -> None:
    job, dist = _job(coll)
    job.collective()
    assert dist.total == counted


def test_a_truth_line_carries_the_counts_and_the_clock_with_pauses(
    capsys: pytest.CaptureFixture[str]
) -> None:
    timer = Timer(None, 1, 2.0)
    timer.dist = CountedDist(FakeDist())
    for _ in range(3):
        timer.dist.all_reduce("t")
    with timer.dist.aside():
        timer.dist.all_reduce("t")
    timer.paused = 5.0
    timer.emit()
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (line["collectives"], line["step_collectives"]) == (4, 3)
    assert line["clock_s"] - line["wall_s"] == pytest.approx(5.0, abs=0.01)


def test_the_truth_has_collectives_per_real_second_over_the_steady_span() -> None:
    """9,000 steps' and 40 timing collectives in 2 s of clock (1.9 s of it the rank's own
    wall time, kernels-alone timings left out): NCCL saw 4,520 a second."""
    origin = {"wall_s": 0.0, "clock_s": 0.0, "steps": 0, "collectives": 100,
              "step_collectives": 90}
    last = {"wall_s": 1.9, "clock_s": 2.0, "steps": 1000, "compute_s": 1.0,
            "collectives": 9140, "step_collectives": 9090}
    got = parts(origin, last)
    assert got["collectives_per_second"] == pytest.approx(4520.0)
    assert got["step_collectives_per_second"] == pytest.approx(4500.0)
    uncounted = parts({"wall_s": 0.0, "steps": 0}, {"wall_s": 1.0, "steps": 10})
    assert "collectives_per_second" not in uncounted  # one GPU: no dist, no count


# --- the report -------------------------------------------------------------------------------

def _row(gpus: list[str], truth: dict[str, float | None], rates: dict[str, list[float | None]]
         ) -> dict[str, Any]:
    n = max(len(v) for v in rates.values())
    windows = [{"t": float(t), "gpus": {g: {"collectives": rates[g][t]} for g in gpus}}
               for t in range(n)]
    return {"workload": "split_job", "gpus": gpus, "skip": 2.0, "windows": windows,
            "truth": {g: {**dict.fromkeys(PARTS, 0.25), "collectives_per_second": v,
                          "step_collectives_per_second": v}
                      for g, v in truth.items() if v is not None},
            "exporter": {}, "check": {"pass": True}}


RESULT = {"rows": {
    # the first two windows are before the steady span: never averaged
    "tp_decode": _row(["0", "1"], {"0": 4500.0, "1": 4500.0},
                      {"0": [9.0, 9.0, 4400.0, 4600.0], "1": [9.0, 9.0, 4500.0, 4410.0]}),
    "no_series": _row(["2", "3"], {"2": 120.0, "3": 120.0},
                      {"2": [None, None, None], "3": [None, None, None]}),
    "solo": _row(["3"], {"3": None}, {"3": [0.0, 0.0, 0.0]}),
    "broken": {"error": "no ready"},
    "bursty": {"workload": "split_bursty", "gpus": ["2"], "util_check": {}},
}}


def test_the_report_sets_the_exporters_rate_beside_the_ranks_count() -> None:
    table = render_collectives(RESULT).splitlines()
    assert table[0].startswith("| row | GPU | collectives/s by the ranks")
    body = {(c[1].strip(), c[2].strip()): [x.strip() for x in c[3:7]]
            for c in (line.split("|") for line in table[2:])}
    assert body[("tp_decode", "0")] == ["4500.0", "4500.0", "4500.0", "1.000"]
    assert body[("", "1")] == ["4500.0", "4500.0", "4455.0", "0.990"]
    assert body[("no_series", "2")] == ["120.0", "120.0", "-", "-"]
    assert body[("solo", "3")] == ["-", "-", "0.0", "-"]
    assert len(table) == 2 + 5  # no row for the error, none for the bursty load


def test_the_report_command_prints_it_after_the_split(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = tmp_path / "split.json"
    done.write_text(json.dumps(RESULT))
    assert main(["--report", str(done)]) == 0
    out = capsys.readouterr().out
    assert out.index("| row | GPU | truth:") < out.index("collectives/s by the ranks")


# --- the plans --------------------------------------------------------------------------------

def _rows(plan: str) -> list[tuple[str, str]]:
    return [cell for slot in PLANS[plan] for cell in slot]


def test_final_c_is_final_a_without_the_serving_slot_and_final_d_is_final_b() -> None:
    rows = {r for r, _g in _rows("final_c")}
    assert rows == {"checkpoint", "jitter", "tp_decode", "tiny_sync", "fp32_allgather",
                    "fp16_reduce_scatter", "broadcast_skew", "sendrecv_membound",
                    "h2d_loader", "shape_tp_bf16_1024", "shape_tp_bf16_2048",
                    "shape_tp_bf16_3072", "shape_tp_bf16_8192", "shape_tp_fp32_2048"}
    assert set(_rows("final_c")) == set(_rows("final_a")) - {("bursty", "2"),
                                                             ("solo_small", "3")}
    assert PLANS["final_d"] == PLANS["final_b"]
    for plan in ("final_c", "final_d"):
        for slot in PLANS[plan]:  # no GPU twice in a slot
            gpus = [g for _r, cell in slot for g in cell.split(",")]
            assert len(gpus) == len(set(gpus)), slot
            assert all(r in split.ROWS for r, _g in slot)


def test_a_plans_wall_time_is_its_slots_and_the_call() -> None:
    """31-33 s a slot at STEADY=15 SKIP=4 in the final run; call B (final_d's plan) 319 s."""
    assert plan_seconds("final_d") == pytest.approx(319.0, abs=10.0)
    assert plan_seconds("final_c") == pytest.approx(245.0, abs=5.0)
    assert plan_seconds("final_c", steady=30.0, skip=5.0) > plan_seconds("final_c") + 7 * 15
    assert "back_to_back" in BEFORE  # final_d's one row with a job before it


def test_a_row_says_whether_the_daemon_reached_nccls_ras() -> None:
    text = ("goodput_nccl_ras_answered %s\ngoodput_nccl_communicators %s\n"
            'goodput_gpu_utilization_ratio{gpu="0"} 0.5\n')
    windows = [scrape_more(text % (a, c)) for a, c in ((1, 2), (0, 0), (1, 3), (1, 2))]
    assert nccl_seen(windows) == {"ras_answered": 0.75, "communicators": 3.0}
    assert nccl_seen([scrape_more(METRICS % (1, 2))]) == {"ras_answered": None,
                                                          "communicators": None}
