"""The job model replayed on the windows measured on H200 (issue 42): each row's waited
shares, time split and straggler names against the ranks' own timing.

``tests/fixtures/jobs/h200-4gpu-windows.json`` (four GPUs, the calibration run),
``h200-2gpu-windows.json`` (two GPUs, the first validation run) and
``h200-4gpu-live-windows.json`` (four GPUs live, the run that refitted the collective link
rate: 8 MiB all-reduces move faster on four GPUs than on two) hold every 1 s window one daemon
published while the ranks ran (graphics activity, SM active, tensor, NVLink and PCIe bytes
per GPU) and each rank's CUDA-event truth: its communication time and the transfer alone
(timed after a barrier), whose difference is the share it waited. Replaying them pins the
calibration (own hollow ratio, collective link rate, spin SM share) to what was measured:
a change that moves a row's estimate by more than the report's tolerance fails here.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from exporter.model.config import ModelConfig
from exporter.model.core import Window, assess
from exporter.model.jobs import PARTS, WAITING, JobTracker, judge
from tests.test_model_split_h200 import split

FIXTURES = Path(__file__).parent / "fixtures" / "jobs"
ROWS: Mapping[str, Any] = json.loads((FIXTURES / "h200-4gpu-windows.json").read_text())["rows"]
TWO: Mapping[str, Any] = json.loads((FIXTURES / "h200-2gpu-windows.json").read_text())["rows"]
FOUR: Mapping[str, Any] = json.loads(
    (FIXTURES / "h200-4gpu-live-windows.json").read_text())["rows"]
DATA: Mapping[str, Any] = json.loads(
    (FIXTURES / "h200-split2-data-windows.json").read_text())["rows"]
"""Issue 46's second bench session: the [lost] rows again on four H200, each phase's launch
gap out of the truth, beside GEMMs of every size alone and as a tensor-parallel decode."""
TOLERANCE = 0.05
STEADY = 10.0
"""Seconds after the ranks said ready before a window counts as steady."""
STRAGGLERS = {"straggler_10pct": "3", "host_stall": "3"}
NOBODY = ("rotating", "pipeline_4stage", "late_joiner", "balanced", "comm_heavy",
          "back_to_back")


def window(x: Mapping[str, Any]) -> Window:
    links = tuple((link, d, float(x[f"{link}_{d}"])) for link in ("nvlink", "pcie")
                  for d in ("rx", "tx") if x.get(f"{link}_{d}") is not None)
    return Window(
        seconds=1.0, util=x["util"], graphics_active=x["graphics"], sm_active=x["sm_active"],
        tensor_active=x["tensor"], profiling_available=True, processes=1,
        nvlink_bytes_per_second=(x["nvlink_rx"] or 0) + (x["nvlink_tx"] or 0),
        bus_bytes_per_second=links, gpu_name="NVIDIA H200",
    )


def replay(name: str, cfg: ModelConfig | None = None,
           rows: Mapping[str, Any] = ROWS) -> list[tuple[float, Any]]:
    cfg = cfg or ModelConfig()
    tracker = JobTracker()
    out = []
    for w in rows[name]["windows"]:
        job = {g: (win, assess(win, cfg)) for g, x in sorted(w["gpus"].items())
               if (win := window(x)) is not None}
        out.append((w["t"], judge(job, tracker, 1.0, cfg)))
    return out


def waited(name: str, rows: Mapping[str, Any] = ROWS, steady: float = STEADY,
           cfg: ModelConfig | None = None) -> dict[str, float]:
    """Each GPU's waited share, the mean over the row's windows from ``steady`` seconds on."""
    judged = [j for t, j in replay(name, cfg, rows=rows) if t >= steady]
    return {g: statistics.mean(j.waited_share[g] for j in judged) for g in judged[0].waited_share}


def truth(name: str, rows: Mapping[str, Any] = ROWS) -> dict[str, float]:
    return {r: max(t["comm"] - t["pure_comm"], 0.0) for r, t in rows[name]["truth"].items()}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_waited_share_within_tolerance_of_the_ranks_timing(name: str) -> None:
    if name == "late_joiner":
        pytest.skip("its truth starts before the first window (the late rank's first seconds)")
    if name == "comm_heavy":
        pytest.skip("its truth timed each small all-reduce alone, which overstates the "
                    "transfer (the 2-GPU run found it longer than the ranks' whole comm "
                    "time); the batched truth of the 2-GPU run is checked instead")
    got_all = waited(name)
    for gpu, want in truth(name).items():
        got = got_all[gpu]
        assert abs(got - want) <= TOLERANCE, f"{name} GPU {gpu}: {got:.3f} vs truth {want:.3f}"


@pytest.mark.parametrize(("rows", "name"), [*(("two", n) for n in sorted(TWO)),
                                            *(("four", n) for n in sorted(FOUR))])
def test_validation_rows_waited_share_within_tolerance(rows: str, name: str) -> None:
    """The validation runs: every row, the late joiner judged from its start (its windows
    begin as the ranks say ready, the late rank's 8 s included)."""
    if (rows, name) == ("four", "comm_heavy"):
        pytest.skip("its truth is the ranks' events alone (launch gaps counted as waiting); "
                    "the re-run with launch gaps taken out is checked instead")
    measured = TWO if rows == "two" else FOUR
    steady = 0.0 if name == "late_joiner" else STEADY
    got_all = waited(name, measured, steady)
    for gpu, want in truth(name, measured).items():
        got = got_all[gpu]
        assert abs(got - want) <= TOLERANCE, f"{name} GPU {gpu}: {got:.3f} vs truth {want:.3f}"


def test_small_collectives_on_four_gpus_are_not_read_as_transfer() -> None:
    """The four-GPU tensor-parallel-like job (4096-square GEMMs, 8 MiB all-reduces) is what
    fixed the link rate: at the former 160 GB/s its transfer read 0.22 of the time where the
    ranks timed 0.16, and GPU 2's waiting 0.145 against 0.201 (the calibration run, whose
    truth was the ranks' events alone: 0.10-0.16 of their compute and collective time had no
    kernel resident, launch gaps). Re-run on four H200 with each phase's launch gap taken
    out of the truth (split2-bench, 2026-11-28 19:54 UTC): the ranks waited 0.18-0.22 and
    the model reads every GPU within 0.035."""
    row = DATA["lost_comm_heavy"]
    got = split(row["windows"], skip=row["skip"])
    for gpu, want in row["truth"].items():
        assert abs(got[gpu][WAITING] - want[WAITING]) <= 0.035, (
            f"GPU {gpu}: {got[gpu][WAITING]:.3f} vs {want[WAITING]:.3f}")
    old = ModelConfig(collective_link_bytes_per_second=160e9)
    assert waited("comm_heavy", FOUR, cfg=old)["2"] < 0.201 - TOLERANCE


@pytest.mark.parametrize("name", ["straggler_10pct", "host_stall"])
def test_the_live_four_gpu_stragglers_are_named(name: str) -> None:
    judged = [j for t, j in replay(name, rows=FOUR) if t >= STEADY + 2]
    assert sum(j.straggler == "3" for j in judged) / len(judged) >= 0.9
    assert all(j.straggler in ("", "3") for j in judged)


@pytest.mark.parametrize("name", sorted(set(FOUR) - {"straggler_10pct", "host_stall"}))
def test_the_live_four_gpu_rows_without_a_straggler_name_nobody(name: str) -> None:
    named = [(t, j.straggler) for t, j in replay(name, rows=FOUR) if t >= STEADY and j.straggler]
    assert not named


@pytest.mark.parametrize("name", sorted(ROWS))
def test_each_gpus_split_sums_to_one_every_window(name: str) -> None:
    for _t, j in replay(name):
        for gpu, parts in j.parts.items():
            assert set(parts) == set(PARTS)
            assert sum(parts.values()) == pytest.approx(1.0, abs=1e-9), gpu
            assert parts[WAITING] == pytest.approx(j.waited_share[gpu])
            assert all(v >= 0.0 for v in parts.values())


@pytest.mark.parametrize("name", sorted(STRAGGLERS))
def test_a_persistent_straggler_is_named_in_nine_of_ten_steady_windows(name: str) -> None:
    judged = [j for t, j in replay(name) if t >= STEADY + 2]
    named = sum(j.straggler == STRAGGLERS[name] for j in judged)
    assert named / len(judged) >= 0.9
    assert all(j.straggler in ("", STRAGGLERS[name]) for j in judged)


@pytest.mark.parametrize("name", NOBODY)
def test_waiting_alike_names_nobody_after_the_first_ten_seconds(name: str) -> None:
    named = [(t, j.straggler) for t, j in replay(name) if t >= STEADY and j.straggler]
    assert not named


def test_nobody_is_named_from_a_jobs_first_seconds() -> None:
    """The host-stalled rank is obvious at once, yet named only after the confirmation."""
    cfg = ModelConfig()
    first = [t for t, j in replay("host_stall") if j.straggler]
    assert first and first[0] >= cfg.straggler_confirm_seconds - 1


def test_a_job_started_right_after_another_shares_nothing_with_it() -> None:
    """The same identity (a pod, a Slurm job id reused) runs a straggler job, its processes
    all end, and a balanced job starts on the same GPUs: the old straggler is not carried
    over, and the new job is judged from its own windows only."""
    cfg = ModelConfig()
    tracker = JobTracker()
    for w in ROWS["host_stall"]["windows"][:20]:
        job = {g: (win, assess(win, cfg)) for g, x in w["gpus"].items() if (win := window(x))}
        last = judge(job, tracker, 1.0, cfg)
    assert last.straggler == "3"
    gone = {g: (Window(seconds=1.0, util=0.0, graphics_active=0.0, sm_active=0.0,
                       profiling_available=True, processes=0), None) for g in "0123"}
    ended = judge({g: (w, assess(w, cfg)) for g, (w, _a) in gone.items()}, tracker, 1.0, cfg)
    assert ended.straggler == "" and tracker.smoothed == {}
    for w in ROWS["balanced"]["windows"]:
        job = {g: (win, assess(win, cfg)) for g, x in w["gpus"].items() if (win := window(x))}
        assert judge(job, tracker, 1.0, cfg).straggler == ""


def test_one_unlucky_first_window_weighs_no_more_than_the_next() -> None:
    """The smoothing is a plain mean until its time constant has passed."""
    from exporter.model.jobs import Smoothed

    s = Smoothed()
    s.add(1.0, 1.0, 3.0)
    for _ in range(2):
        s.add(0.0, 1.0, 3.0)
    assert s.value == pytest.approx(1 / 3)
