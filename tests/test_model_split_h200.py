"""The time split replayed on issue 46's windows measured on H200 (split-bench's first device
call, ``tests/fixtures/jobs/h200-split-explore-windows.json``): every 1 s window one daemon
published per GPU (NVML utilization and its samples, GPM graphics, SM, tensor, FP and DRAM
activity, NVLink and PCIe bytes, the PCIe peak) beside each rank's CUDA-event truth for
every part of the split.

Where the split was wrong on main, and why:

- a checkpoint (1 GiB device-to-host, then 1 s on the host) read as a transfer because copy
  time was NVML's utilization minus GPM's graphics activity: two readings of different
  periods (NVML's ~200 ms sample, GPM's poll window) whose means agree (0.719 vs 0.720) but
  whose difference, clipped at 0, keeps every misalignment as copy time; now copy time is
  the PCIe bytes the copy engines moved;
- a tiny per-step all-reduce moved too few bytes to count as exchanging, so its waiting read
  0 and went to host_stalled; now any NVLink traffic counts (48 KB/s measured, 0 on a GPU
  in no collective);
- the published utilization was NVML's last sample period, off by up to 0.75 in a second
  of a bursty load; now the samples of the window are averaged.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pynvml
import pytest

from exporter.model.config import ModelConfig
from exporter.model.core import Window, assess, copy_time, host_copy_time, kernel_time
from exporter.model.jobs import (
    PARTS,
    TRANSFERRING,
    WAITING,
    JobTracker,
    OwnLearner,
    judge,
)
from exporter.sources import utilization as uw

FIXTURE = Path(__file__).parent / "fixtures" / "jobs" / "h200-split-explore-windows.json"
ROWS: Mapping[str, Any] = json.loads(FIXTURE.read_text())["rows"]
TOLERANCE = 0.05
PASSING = ("checkpoint", "jitter", "fp32_allgather", "fp16_reduce_scatter",
           "sendrecv_membound", "solo_small", "bursty")
"""Rows whose every part is within the tolerance of the ranks' truth on every GPU."""


def window(x: Mapping[str, Any], util: str = "util_avg") -> Window:
    """The model's window from one GPU's readings, utilization as the exporter now reads it
    (NVML's samples averaged over the window) unless ``util`` says otherwise."""
    links = tuple((link, d, float(x[f"{link}_{d}"])) for link in ("nvlink", "pcie")
                  for d in ("rx", "tx") if x.get(f"{link}_{d}") is not None)
    use = (("pcie", max(x["pcie_rx"], x["pcie_tx"]) / x["peak_pcie"]),)
    return Window(
        seconds=1.0, util=x.get(util, x["util"]), graphics_active=x["graphics"],
        sm_active=x["sm_active"],
        sm_occupancy=x["sm_occupancy"], tensor_active=x["tensor"], dram_active=x["dram"],
        fp_active=max(x["fp16"], x["fp32"], x["fp64"]), profiling_available=True,
        processes=x["processes"], nvlink_bytes_per_second=x["nvlink_rx"] + x["nvlink_tx"],
        bus_bytes_per_second=links, link_use=use, gpu_name="NVIDIA H200",
        collectives_per_second=x.get("collectives"),
    )


def steady(name: str) -> Iterator[dict[str, Any]]:
    row = ROWS[name]
    return (w for w in row["windows"] if w["t"] >= row["skip"])


def split(windows: list[dict[str, Any]], cfg: ModelConfig | None = None,
          tracker: JobTracker | None = None, skip: float = 0.0,
          util: str = "util_avg") -> dict[str, dict[str, float]]:
    """Each GPU's mean share per part over the windows from ``skip`` seconds on."""
    cfg = cfg or ModelConfig()
    tracker = tracker or JobTracker()
    parts: dict[str, list[Mapping[str, float]]] = {}
    for w in windows:
        job = {g: (win, assess(win, cfg)) for g, x in sorted(w["gpus"].items())
               if (win := window(x, util)) is not None}
        judged = judge(job, tracker, 1.0, cfg)
        if w["t"] >= skip:
            for gpu, p in judged.parts.items():
                parts.setdefault(gpu, []).append(p)
    return {g: {k: statistics.mean(p[k] for p in ps) for k in PARTS} for g, ps in parts.items()}


def row_split(name: str, util: str = "util_avg") -> dict[str, dict[str, float]]:
    return split(ROWS[name]["windows"], skip=ROWS[name]["skip"], util=util)


@pytest.mark.parametrize("name", PASSING)
def test_every_part_is_within_tolerance_of_the_ranks_truth(name: str) -> None:
    got = row_split(name)
    for gpu, truth in ROWS[name]["truth"].items():
        assert sum(got[gpu].values()) == pytest.approx(1.0, abs=1e-9)
        for part in PARTS:
            assert abs(got[gpu][part] - truth[part]) <= TOLERANCE, (
                f"{name} GPU {gpu} {part}: {got[gpu][part]:.3f} vs {truth[part]:.3f}")


@pytest.mark.parametrize("gpu", ["0", "1"])
def test_the_checkpoint_is_host_time_not_a_transfer(gpu: str) -> None:
    """Both ranks copy 1 GiB to pinned host memory every 4 s and spend 1 s on the host: the
    ranks were on the host 0.27 of the time and transferred 0.03 (the copy 0.005)."""
    got, truth = row_split("checkpoint")[gpu], ROWS["checkpoint"]["truth"][gpu]
    assert got["host_stalled"] == pytest.approx(truth["host_stalled"], abs=0.02)
    assert got[TRANSFERRING] == pytest.approx(truth[TRANSFERRING], abs=0.015)


@pytest.mark.parametrize("name", ["checkpoint", "jitter"])
def test_the_split_does_not_lean_on_nvmls_utilization(name: str) -> None:
    """Fed NVML's last-period utilization (what main published) instead of the window's,
    the split stays within the tolerance: neither kernel time nor copy time reads it. Main
    put 0.12 of the checkpoint's GPU 0 and 0.07-0.12 of the jittery loader's GPUs into
    transferring, taken from host_stalled."""
    got = row_split(name, util="util")
    for gpu, truth in ROWS[name]["truth"].items():
        for part in PARTS:
            assert abs(got[gpu][part] - truth[part]) <= TOLERANCE, (
                f"{name} GPU {gpu} {part}: {got[gpu][part]:.3f} vs {truth[part]:.3f}")


def test_the_checkpoints_copy_time_was_the_misalignment_of_two_readings() -> None:
    """The real cause: over the row NVML's utilization and GPM's graphics activity agree
    (0.72 each), yet their per-window difference clipped at 0, the former copy time, is 0.085
    on GPU 0: it comes from the two readings covering different periods, not from copies.
    Main's split put 0.12 into transferring and 0.20 into host_stalled there; the PCIe bytes
    the copy engines moved say 0.004."""
    windows = [w["gpus"]["0"] for w in steady("checkpoint")]
    util = statistics.mean(x["util"] for x in windows)
    graphics = statistics.mean(x["graphics"] for x in windows)
    assert util == pytest.approx(graphics, abs=0.01)
    former = statistics.mean(copy_time(window(x, util="util")) or 0.0 for x in windows)
    assert former >= 0.08
    assert statistics.mean(host_copy_time(window(x)) for x in windows) <= 0.01


def test_a_tiny_per_step_sync_is_counted_as_waiting() -> None:
    """The same small GEMMs with a 4-byte all-reduce per step: 48 KB/s of NVLink traffic,
    below the former floor, so main read 0 waiting and gave the time to host_stalled. The
    ranks timed 0.055-0.061 in the collective less its launch gap (0.007 of it the op
    alone, timed on the GPU: the first run's 0.115-0.129 timed the host's launch path too);
    the exporter now reads that collective time as waiting."""
    got = truth_split("tiny_sync")
    for gpu, truth in TRUTH_ROWS["tiny_sync"]["truth"].items():
        assert got[gpu][WAITING] >= 0.05
        collective = got[gpu][WAITING] + got[gpu][TRANSFERRING]
        assert collective == pytest.approx(truth[WAITING] + truth[TRANSFERRING], abs=TOLERANCE)


def test_a_tensor_parallel_decode_has_its_collective_time() -> None:
    """Eight 4096-square GEMMs each followed by a 256 KB all-reduce: the ranks timed 0.21-0.23
    in the collectives, 0.19 of it each op alone (latency-bound: 58 us for 256 KB). Waiting
    plus transfer matches; the split between them does not (see above)."""
    got = row_split("tp_decode")
    for gpu, truth in ROWS["tp_decode"]["truth"].items():
        collective = got[gpu][WAITING] + got[gpu][TRANSFERRING]
        assert collective == pytest.approx(truth[WAITING] + truth[TRANSFERRING], abs=TOLERANCE)


def test_a_host_to_device_loader_is_a_transfer() -> None:
    """512 MiB host-to-device per step: the copies took 0.45 of the ranks' time."""
    got = row_split("h2d_loader")
    for gpu, truth in ROWS["h2d_loader"]["truth"].items():
        assert got[gpu][TRANSFERRING] == pytest.approx(truth[TRANSFERRING], abs=0.02)
        assert got[gpu]["host_stalled"] == pytest.approx(truth["host_stalled"], abs=0.02)


def test_a_job_learns_its_small_kernels_hollowness_where_it_waits_on_nobody() -> None:
    """The 4096-square GEMMs alone (solo_small, no collective) are 0.067 hollow, not the
    0.04 of 8192-square ones. A job that runs them alone for a while (solo_small's windows,
    given to both GPUs) and then with a tiny sync per step (tiny_sync's) learns that in the
    first phase and reads the second's waiting within the tolerance of the ranks' truth;
    with nothing to learn from, it keeps the default."""
    solo = [{"t": w["t"], "gpus": {g: w["gpus"]["3"] for g in ("2", "3")}}
            for w in steady("solo_small")]
    tracker = JobTracker()
    split(solo, tracker=tracker)
    own = tracker.learner.own(ModelConfig())
    assert own.learned
    assert own.ratio == pytest.approx(0.067, abs=0.01)
    later = [{**w, "t": w["t"] + 100.0} for w in ROWS["tiny_sync"]["windows"]]
    got = split(later, tracker=tracker, skip=100.0 + ROWS["tiny_sync"]["skip"])
    for gpu, truth in ROWS["tiny_sync"]["truth"].items():
        assert got[gpu][WAITING] == pytest.approx(truth[WAITING], abs=TOLERANCE)


@pytest.mark.parametrize("name", ["checkpoint", "jitter", "tp_decode", "fp16_reduce_scatter",
                                  "sendrecv_membound", "h2d_loader"])
def test_nothing_raises_the_default_where_every_rank_communicates_alike(name: str) -> None:
    """Windows with a collective teach nothing more of the job's own kernels than a ceiling
    while its ranks are alike (balanced, or imbalance that moves between them): their hollow
    time is as much waiting as their own. (The checkpoint's ranks wait next to nothing
    between checkpoints, so its 8192-square GEMMs are capped at 0.03.)"""
    tracker = JobTracker(learner=OwnLearner())
    split(ROWS[name]["windows"], tracker=tracker)
    cfg = ModelConfig()
    own = tracker.learner.own(cfg)
    assert own.ratio <= cfg.own_hollow_ratio
    assert own.learned == (name == "checkpoint")


def test_the_rank_everyone_waits_for_bounds_the_jobs_own_hollowness() -> None:
    """broadcast_skew: 24 3072-square GEMMs per step, rank 0 with 30 % more, a 16 MiB
    broadcast. Rank 0 waits 0.03, its kernels 0.10-0.12 hollow, far more than the 0.04
    default: learned from it, rank 1's waiting reads 0.34 against the ranks' 0.29 (0.37 with
    the default) and rank 0's 0.01 against 0.03 (0.08 with the default)."""
    tracker = JobTracker()
    got = split(ROWS["broadcast_skew"]["windows"], tracker=tracker,
                skip=ROWS["broadcast_skew"]["skip"])
    own = tracker.learner.own(ModelConfig())
    assert own.learned and 0.065 <= own.ratio <= 0.12
    for gpu, truth in ROWS["broadcast_skew"]["truth"].items():
        assert got[gpu][WAITING] == pytest.approx(truth[WAITING], abs=TOLERANCE)
    assert got["0"]["working"] == pytest.approx(ROWS["broadcast_skew"]["truth"]["0"]["working"],
                                                abs=TOLERANCE)


def _samples(x: Mapping[str, Any]) -> list[Any]:
    out = []
    for ts, value in x.get("util_samples") or ():
        sample = pynvml.c_nvmlSample_t()
        sample.timeStamp = round(ts * 1e6)
        sample.sampleValue.uiVal = round(value * 100)
        out.append(sample)
    return out


def utilization_against_truth(row: Mapping[str, Any]) -> tuple[list[float], list[float]]:
    """The bursty load's steady windows on GPU 2: NVML's samples averaged as the NVML source
    publishes them (each window over the span its samples cover), beside the rank's kernel
    time over that same span."""
    truth = {round(u["t1"], 2): u["truth"] for u in row["util_truth"]}
    last: int | None = None
    got: list[float] = []
    want: list[float] = []
    for w in row["windows"]:
        samples = _samples(w["gpus"]["2"])
        avg = uw.window(samples, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, last) if samples else None
        if avg is None:
            continue
        last = avg.newest_us
        t = truth.get(round(avg.newest_us / 1e6, 2))
        if t is not None and w["t"] >= row["skip"]:
            got.append(avg.utilization)
            want.append(t)
    return got, want


def test_published_utilization_over_a_bursty_load_matches_kernel_time() -> None:
    """One GPU alternating GEMM bursts and host stalls of 0.2-1 s. NVML's samples since the
    last poll, averaged as the NVML source does, are within 0.002 of the kernel time over
    the run (main published NVML's last period: +0.083), and within one sample period's
    lag (0.2) of each window's: they cover up to the newest sample, ~0.2 s before the poll
    the truth's window ends at."""
    row = ROWS["bursty"]
    truth = {round(u["t1"], 2): u["truth"] for u in row["util_truth"]}
    last: int | None = None
    got, want, former = [], [], []
    for w in row["windows"]:
        x = w["gpus"]["2"]
        samples = _samples(x)
        avg = uw.window(samples, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, last) if samples else None
        if avg is not None:
            last = avg.newest_us
        t = truth.get(round(w["poll_unix"], 2))
        if avg is None or t is None or w["t"] < row["skip"]:
            continue
        got.append(avg.utilization)
        want.append(t)
        former.append(x["util"])
    assert len(got) >= 20
    assert statistics.mean(got) == pytest.approx(statistics.mean(want), abs=0.01)
    assert abs(statistics.mean(former) - statistics.mean(want)) >= 0.05
    assert max(abs(g - t) for g, t in zip(got, want, strict=True)) <= 0.2


def test_kernel_and_copy_time_add_up_to_nvmls_utilization() -> None:
    """The split's kernel time is GPM's graphics activity (the same window as SM activity)
    and its copy time the PCIe bytes'; NVML's utilization counts both, and its samples
    averaged over the windows agree with their sum within 0.02 on every row (the
    host-to-device loader: 0.53 kernels + 0.45 copies against 0.97)."""
    for name in ROWS:
        for gpu in ROWS[name]["truth"]:
            xs = [w["gpus"][gpu] for w in steady(name) if "util_avg" in w["gpus"][gpu]]
            busy = statistics.mean(min((kernel_time(window(x), usable=True) or 0.0)
                                       + host_copy_time(window(x)), 1.0) for x in xs)
            assert busy == pytest.approx(statistics.mean(x["util_avg"] for x in xs),
                                         abs=0.02), (name, gpu)


# split-bench's third device call: the truth less each phase's launch gap (time the GPU
# reached a phase before the host launched into it: host time) and collectives alone timed
# with the GPU queued ahead (a 256 KB all-reduce: 9 us of GPU time, not the 58 us of a
# host-launched one).
TRUTH_FIXTURE = FIXTURE.parent / "h200-split-truth-windows.json"
TRUTH_ROWS: Mapping[str, Any] = json.loads(TRUTH_FIXTURE.read_text())["rows"]
TRUTH_PASSING = ("checkpoint", "jitter", "h2d_loader", "bursty", "solo_small", "tiny_sync",
                 "tp_decode")
"""tiny_sync and tp_decode since the GEMMs' tensor rate goes with their hollowness and the
default is 0.06 (worst part -0.055 and -0.081 before: working)."""


def truth_split(name: str) -> dict[str, dict[str, float]]:
    return split(TRUTH_ROWS[name]["windows"], skip=TRUTH_ROWS[name]["skip"])


@pytest.mark.parametrize("name", TRUTH_PASSING)
def test_every_part_is_within_tolerance_of_the_launch_gap_truth(name: str) -> None:
    got = truth_split(name)
    for gpu, truth in TRUTH_ROWS[name]["truth"].items():
        assert sum(got[gpu].values()) == pytest.approx(1.0, abs=1e-9)
        for part in PARTS:
            assert abs(got[gpu][part] - truth[part]) <= TOLERANCE, (
                f"{name} GPU {gpu} {part}: {got[gpu][part]:.3f} vs {truth[part]:.3f}")


def test_kernels_next_to_copies_are_not_read_as_waiting() -> None:
    """512 MiB host-to-device per step: the GEMMs between the copies are 0.17 hollow (0.035
    in a steady stream), so without ``EDGE_HOLLOW`` the ranks read 0.055 waiting against
    0.009 and 0.06 too little working; now 0.04 waiting, working 0.045 short."""
    got = truth_split("h2d_loader")
    for gpu, truth in TRUTH_ROWS["h2d_loader"]["truth"].items():
        assert got[gpu][WAITING] <= truth[WAITING] + 0.035
        assert got[gpu]["working"] == pytest.approx(truth["working"], abs=TOLERANCE)


@pytest.mark.parametrize("name", ["tp_decode", "tiny_sync"])
def test_small_gemms_and_small_collectives_have_their_collective_time(name: str) -> None:
    """A tensor-parallel decode (4096-square GEMMs, 256 KB all-reduces) and the same GEMMs
    with a 4-byte sync: waiting plus transfer within the tolerance of the ranks'. Their
    split leans to waiting (+0.08 and +0.05): the GEMMs are 0.066 hollow, not the 0.04
    default, and these jobs have no window without a collective nor a rank the other waits
    for to learn that from (docs/efficiency.md)."""
    got = truth_split(name)
    for gpu, truth in TRUTH_ROWS[name]["truth"].items():
        collective = got[gpu][WAITING] + got[gpu][TRANSFERRING]
        assert collective == pytest.approx(truth[WAITING] + truth[TRANSFERRING], abs=TOLERANCE)
        assert got[gpu][WAITING] >= truth[WAITING]  # leans to waiting, never hides it


def test_utilization_matches_kernel_time_over_the_span_its_samples_cover() -> None:
    """bursty again, each window judged over the span its samples cover (newest sample at
    the previous poll to the newest at this one), as the NVML source publishes it: within
    0.01 of the kernel-busy truth in every window (the goal is 0.1), and over the run."""
    row = TRUTH_ROWS["bursty"]
    got, want = utilization_against_truth(row)
    assert len(got) >= 12
    assert max(abs(g - t) for g, t in zip(got, want, strict=True)) <= 0.01
    assert statistics.mean(got) == pytest.approx(statistics.mean(want), abs=0.005)


# split-bench's final run (nineteen rows, the [lost] rows as 2-GPU jobs) and its last call
# (a minute of the bursty load; tp_decode, tiny_sync and small GEMMs alone again), both as
# committed by split-bench (docs/validation/split-h200.md). The replay here is the same model
# the live daemon ran (split-model 69b8977).
FINAL: Mapping[str, Any] = json.loads(
    (FIXTURE.parent / "h200-split-final-windows.json").read_text())["rows"]
LAST: Mapping[str, Any] = json.loads(
    (FIXTURE.parent / "h200-split-last-windows.json").read_text())["rows"]
FINAL_PASSING = ("checkpoint", "jitter", "fp32_allgather", "fp16_reduce_scatter",
                 "sendrecv_membound", "h2d_loader", "bursty", "solo_small", "lost_rotating",
                 "lost_pipeline_gpipe", "lost_straggler_10pct", "lost_host_stall",
                 "lost_balanced", "lost_back_to_back")
"""Every part of every GPU within the tolerance. Outside it: tp_decode (working -0.063) and
tiny_sync (host_stalled +0.057: GPM sees no kernel for 0.04-0.05 of the time this truth
counts as working), broadcast_skew's waiting rank (working -0.058: its GEMMs after each wait
are hollower than its peer's), lost_late_joiner from t = 0 (its first window straddles the
start), lost_comm_heavy (truth without launch gaps in that run)."""


def _rows_split(rows: Mapping[str, Any], name: str) -> dict[str, dict[str, float]]:
    return split(rows[name]["windows"], skip=rows[name]["skip"])


@pytest.mark.parametrize("name", FINAL_PASSING)
def test_the_final_run_every_part_within_tolerance(name: str) -> None:
    got = _rows_split(FINAL, name)
    for gpu, truth in FINAL[name]["truth"].items():
        assert sum(got[gpu].values()) == pytest.approx(1.0, abs=1e-9)
        for part in PARTS:
            assert abs(got[gpu][part] - truth[part]) <= TOLERANCE, (
                f"{name} GPU {gpu} {part}: {got[gpu][part]:.3f} vs {truth[part]:.3f}")


@pytest.mark.parametrize(("rows", "name"), [("final", "tp_decode"), ("last", "tp_decode"),
                                            ("final", "tiny_sync")])
def test_the_final_runs_small_collectives_have_their_collective_time(rows: str,
                                                                     name: str) -> None:
    measured = FINAL if rows == "final" else LAST
    got = _rows_split(measured, name)
    for gpu, truth in measured[name]["truth"].items():
        collective = got[gpu][WAITING] + got[gpu][TRANSFERRING]
        assert collective == pytest.approx(truth[WAITING] + truth[TRANSFERRING], abs=TOLERANCE)


@pytest.mark.parametrize("name", ["tiny_sync", "solo_small", "bursty"])
def test_the_last_call_every_part_within_tolerance(name: str) -> None:
    got = _rows_split(LAST, name)
    for gpu, truth in LAST[name]["truth"].items():
        for part in PARTS:
            assert abs(got[gpu][part] - truth[part]) <= TOLERANCE, (
                f"{name} GPU {gpu} {part}: {got[gpu][part]:.3f} vs {truth[part]:.3f}")


def test_a_bursty_minute_of_utilization_matches_kernel_time() -> None:
    """The issue's goal: over a minute of GEMM bursts and 0.2-1 s host stalls, published
    utilization within 0.03 of the ranks' kernel time, and within 0.1 in every 1 s window
    (each judged over the span its samples cover). The samples, averaged as the NVML source
    does: within 0.01 in every window."""
    row = LAST["bursty"]
    got, want = utilization_against_truth(row)
    assert len(got) >= 55
    assert statistics.mean(got) == pytest.approx(statistics.mean(want), abs=0.03)
    assert max(abs(g - t) for g, t in zip(got, want, strict=True)) <= 0.02
