"""A job's own kernels' hollowness (issue 46), on the windows measured on H200.

Hollow time (kernel resident, SMs empty) is waiting only beyond what the job's own kernels
leave empty. How much that is depends on the kernels' shape: a GEMM's last wave of tiles
leaves SMs empty, the more the fewer its waves (4096-square bf16 GEMMs 0.067 of their time,
8192-square 0.035-0.04). What the counters show of it, measured here:

- a GEMM's tensor-pipe activity per SM-active second is about the same from 4096- to
  8192-square (``tensor_per_sm_active_second``, 0.955), so tensor activity tells the
  SM-active seconds of the job's GEMMs, and ``tensor / (0.955 x (1 - r))`` their kernel
  time at hollowness r; it falls for smaller GEMMs, but a collective's spinning SMs lower
  it as much, so it cannot be read in a job that communicates;
- SM occupancy and DRAM bandwidth per SM-active second do not tell the size (they differ
  by less between 4096- and 8192-square GEMMs than between runs), so r itself is learned
  per job: exactly from windows without any collective, bounded from above by the
  rank that waits least (its waiting cannot be negative) and from below by the rank
  everyone waits for; the configured default where nothing tells.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from exporter.model.config import ModelConfig
from exporter.model.core import assess
from exporter.model.jobs import (
    PARTS,
    WAITING,
    JobTracker,
    ceiling_observation,
    judge,
    transfer_time,
)
from tests.test_model_split_h200 import split, window

FIXTURES = Path(__file__).parent / "fixtures" / "jobs"
FINAL: Mapping[str, Any] = json.loads(
    (FIXTURES / "h200-split-final-windows.json").read_text())["rows"]
TRUTH: Mapping[str, Any] = json.loads(
    (FIXTURES / "h200-split-truth-windows.json").read_text())["rows"]
LAST: Mapping[str, Any] = json.loads(
    (FIXTURES / "h200-split-last-windows.json").read_text())["rows"]
TOLERANCE = 0.05
KAPPA = ModelConfig().tensor_per_sm_active_second


def steady(rows: Mapping[str, Any], name: str, gpu: str) -> list[Mapping[str, Any]]:
    row = rows[name]
    return [w["gpus"][gpu] for w in row["windows"] if w["t"] >= row["skip"]]


def mean(xs: list[Mapping[str, Any]], key: str) -> float:
    return statistics.mean(x[key] for x in xs)


# (fixture, row, GPU, GEMM): GEMMs that wait on nobody (no collective at all, or the rank
# everyone waits for, or a balanced job's): their SM activity is all their own.
ALONE = [
    (FINAL, "solo_small", "3", "bf16 4096, no collective"),
    (LAST, "solo_small", "3", "bf16 4096, no collective"),
    (TRUTH, "solo_small", "3", "bf16 4096, no collective"),
    (FINAL, "lost_balanced", "2", "bf16 8192, balanced"),
    (FINAL, "lost_straggler_10pct", "1", "bf16 8192, the straggler"),
    (FINAL, "checkpoint", "0", "bf16 8192 between checkpoints"),
    (FINAL, "h2d_loader", "0", "bf16 8192 between host-to-device copies"),
]


@pytest.mark.parametrize(("rows", "name", "gpu", "what"), ALONE,
                         ids=[f"{n}-{g}" for _r, n, g, _w in ALONE])
def test_tensor_activity_per_sm_active_second_is_the_same_for_large_gemms_anywhere(
        rows: Mapping[str, Any], name: str, gpu: str, what: str) -> None:
    """0.951-0.961 for 4096- and 8192-square bf16 GEMMs, alone, balanced, between copies or
    checkpoints: the tensor counter tells how many SM-active seconds a job's large GEMMs
    took, and the SM activity it does not explain is its collectives'."""
    xs = steady(rows, name, gpu)
    assert mean(xs, "tensor") / mean(xs, "sm_active") == pytest.approx(KAPPA, abs=0.006), what


def test_occupancy_and_dram_per_sm_active_second_do_not_tell_a_small_gemm_from_a_large_one(
) -> None:
    """4096- against 8192-square GEMMs, each waiting on nobody: 0.067 against 0.035-0.04
    of their kernel time hollow, yet per SM-active second the same occupancy (0.147 vs
    0.152) and DRAM bandwidth (0.202 vs 0.194) within 0.01: only the hollowness itself,
    where it can be seen, tells their size."""
    small, large = steady(FINAL, "solo_small", "3"), steady(FINAL, "lost_balanced", "2")
    for key in ("sm_occupancy", "dram"):
        per = [mean(xs, key) / mean(xs, "sm_active") for xs in (small, large)]
        assert per[0] == pytest.approx(per[1], abs=0.01), key
    # the GEMMs' own hollowness: the share of their kernel time (the balanced job's less
    # its transfer, 0.05) their tensor activity does not account for as SM-active
    own_small = 1 - mean(small, "tensor") / KAPPA / mean(small, "graphics")
    own_large = 1 - mean(large, "tensor") / KAPPA / (mean(large, "graphics") - 0.05)
    assert own_small == pytest.approx(0.069, abs=0.005)
    assert own_large == pytest.approx(0.031, abs=0.01)


def test_tensor_activity_per_kernel_second_is_the_gemms_fullness_times_the_constant() -> None:
    """What a job learns from its windows without a collective: 4096-square GEMMs 0.067
    hollow and 0.889 tensor activity per second of them, which is 0.955 x (1 - 0.067)
    within 0.003: the two numbers are one, so a hollowness learned or bounded anywhere
    carries its tensor rate with it."""
    tracker = JobTracker()
    split(FINAL["solo_small"]["windows"], tracker=tracker)
    own = tracker.learner.own(ModelConfig())
    assert own.learned
    assert own.ratio == pytest.approx(0.067, abs=0.005)
    assert own.tensor == pytest.approx(KAPPA * (1 - own.ratio), abs=0.003)


def _own_after(rows: Mapping[str, Any], name: str, cfg: ModelConfig) -> float:
    tracker = JobTracker()
    for w in rows[name]["windows"]:
        job = {g: (win, assess(win, cfg)) for g, x in sorted(w["gpus"].items())
               if (win := window(x)) is not None}
        judge(job, tracker, 1.0, cfg)
    return tracker.learner.own(cfg).ratio


@pytest.mark.parametrize("name", ["lost_balanced", "lost_straggler_10pct", "lost_late_joiner"])
def test_the_rank_that_waits_least_caps_the_jobs_own_hollowness(name: str) -> None:
    """8192-square GEMMs with a rank that waits next to nothing (balanced, the straggler,
    the rank a late joiner holds back): its GEMMs cannot be hollower than its kernel time
    less its transfer leaves room for, 0.02-0.04 here. So a default set for small GEMMs
    (0.08) is not taken for them, and every part stays within the tolerance."""
    high = ModelConfig(own_hollow_ratio=0.08)
    assert _own_after(FINAL, name, high) <= 0.045
    got = split(FINAL[name]["windows"], cfg=high, skip=FINAL[name]["skip"])
    worst = max(abs(got[g][p] - t[p]) for g, t in FINAL[name]["truth"].items() for p in PARTS)
    assert worst <= TOLERANCE or name == "lost_late_joiner"  # its truth starts before ready


@pytest.mark.parametrize("name", ["tp_decode", "lost_rotating", "lost_back_to_back"])
def test_a_job_whose_ranks_all_wait_keeps_the_default(name: str) -> None:
    """Every rank waits a good part of every window (a decode step's small all-reduces,
    imbalance that rotates between the ranks): the ceiling is loose (0.25-0.3) and nothing
    else tells the kernels' hollowness from the waiting, so the configured default stays."""
    cfg = ModelConfig()
    assert _own_after(FINAL, name, cfg) == cfg.own_hollow_ratio


# Issue 46's second bench session (split2-bench, 2026-11-28 19:54 UTC, four H200): GEMMs of
# every size and precision alone on one GPU, the tensor-parallel decode shape with other GEMM
# sizes, and the [lost] rows on four GPUs with each phase's launch gap out of the truth. None
# of it was used to choose anything above: the rows below check the model on it.
DATA: Mapping[str, Any] = json.loads(
    (FIXTURES / "h200-split2-data-windows.json").read_text())["rows"]

# GEMM -> (own hollowness, tensor per SM-active second) measured alone, steady windows
SOLO = {"bf16_1024": (0.445, 0.553), "bf16_2048": (0.143, 0.865), "bf16_3072": (0.084, 0.920),
        "bf16_4096": (0.072, 0.954), "bf16_6144": (0.051, 0.968), "bf16_8192": (0.039, 0.971),
        "fp16_6144": (0.050, 0.968)}


@pytest.mark.parametrize("shape", sorted(SOLO))
def test_a_job_alone_learns_its_gemms_own_hollowness_whatever_their_size(shape: str) -> None:
    """One GPU, square GEMMs of one size, no collective: what the job learns is what its
    counters show (hollow share 0.084 for 3072-square bf16 GEMMs down to 0.039 for
    8192-square ones). The launch-bound loops of 1024- and 2048-square GEMMs (0.445 and
    0.143 hollow) push 110-190 MB/s of launches over PCIe, above the bus floor, which a
    collective over PCIe also shows: those windows teach nothing."""
    name = f"shape_solo_{shape}"
    want_hollow, want_kappa = SOLO[shape]
    xs = steady(DATA, name, DATA[name]["gpus"][0])
    assert 1 - mean(xs, "sm_active") / mean(xs, "graphics") == pytest.approx(want_hollow,
                                                                             abs=0.003)
    assert mean(xs, "tensor") / mean(xs, "sm_active") == pytest.approx(want_kappa, abs=0.003)
    # the job's learner reads it from the same windows (a one-GPU job is judged like a rank)
    tracker = JobTracker()
    split(DATA[name]["windows"], tracker=tracker)
    cfg = ModelConfig()
    own = tracker.learner.own(cfg)
    launches = mean(xs, "pcie_rx")
    assert own.learned == (launches < cfg.bus_floor_bytes_per_second), launches
    if own.learned:
        assert own.ratio == pytest.approx(want_hollow, abs=0.01)


def test_tensor_per_sm_active_second_is_flat_for_large_gemms_and_falls_for_small_ones() -> None:
    """From 4096- to 8192-square the tensor rate per SM-active second is 0.954-0.971 (the
    setting's 0.955 within 0.016); below it falls with the size as the hollowness rises:
    across the seven shapes, hollowness = 0.011 + 0.97 x (1 - tensor per SM-active second)
    within 0.02. The model does not read hollowness off that rate in a job's windows, though:
    a collective's spinning SMs show no tensor activity and lower it as much (8192-square
    GEMMs with rotating imbalance on four GPUs: 0.85), so it is only clean where the
    hollowness is measured directly, alone."""
    for shape, (hollow, kappa) in SOLO.items():
        if shape.endswith(("4096", "6144", "8192")):
            assert kappa == pytest.approx(KAPPA, abs=0.017), shape
        assert 0.011 + 0.97 * (1 - kappa) == pytest.approx(hollow, abs=0.02), shape
    rotating = steady(DATA, "lost_rotating", "0")
    assert mean(rotating, "tensor") / mean(rotating, "sm_active") < 0.86


LOST4 = ("lost_rotating", "lost_pipeline_gpipe", "lost_straggler_10pct", "lost_host_stall",
         "lost_late_joiner", "lost_balanced", "lost_back_to_back", "shape_tp_bf16_8192",
         "shape_tp_fp32_2048", "shape_tp_fp32_4096")


@pytest.mark.parametrize("name", LOST4)
def test_the_four_gpu_rows_every_part_within_tolerance(name: str) -> None:
    """The [lost] rows on four H200 and the decode shape with 8192-square bf16 and 2048- and
    4096-square FP32 GEMMs (on two): every part of every GPU within 0.05 of the ranks'
    truth (the late joiner from its first whole window with every rank running)."""
    row = DATA[name]
    got = split(row["windows"], skip=row["skip"] + (1.0 if name == "lost_late_joiner" else 0.0))
    for gpu, truth in row["truth"].items():
        assert sum(got[gpu].values()) == pytest.approx(1.0, abs=1e-9)
        for part in PARTS:
            assert abs(got[gpu][part] - truth[part]) <= TOLERANCE, (
                f"{name} GPU {gpu} {part}: {got[gpu][part]:.3f} vs {truth[part]:.3f}")


# split2-bench's second run (20:05 UTC): the truth's working capped at its GEMMs' own time
# (timed alone with the launches queued ahead), so its resident time agrees with GPM's
# graphics activity on every row. Seen after this model was settled: a check, not a fit.
DATA2: Mapping[str, Any] = json.loads(
    (FIXTURES / "h200-split2-data2-windows.json").read_text())["rows"]


@pytest.mark.parametrize("name", ["broadcast_skew", "tiny_sync", "lost_comm_heavy"])
def test_the_refined_truth_every_part_within_tolerance(name: str) -> None:
    """The static imbalance over 3072-square GEMMs with a broadcast (its waiting rank failed
    working -0.058 to -0.076 on the earlier truths), the tiny per-step sync and the
    communication-heavy row on four GPUs: every part of every GPU within 0.05."""
    row = DATA2[name]
    got = split(row["windows"], skip=row["skip"])
    for gpu, truth in row["truth"].items():
        for part in PARTS:
            assert abs(got[gpu][part] - truth[part]) <= TOLERANCE, (
                f"{name} GPU {gpu} {part}: {got[gpu][part]:.3f} vs {truth[part]:.3f}")


@pytest.mark.parametrize(("name", "alone"), [("tp_decode", "shape_solo_bf16_4096"),
                                             ("shape_tp_bf16_3072", "shape_solo_bf16_3072")])
def test_gemms_between_collectives_are_hollower_than_alone(name: str, alone: str) -> None:
    """Where this model still falls short: the decode step's GEMMs, 8 a step each followed
    by a 256 KB all-reduce, ran as long as the same GEMMs alone (the truth's working) but
    with less tensor activity: 0.10 hollow for 4096-square ones (0.067 alone), 0.17 for
    3072-square ones (0.082). Nothing in the ranks' counters tells that from waiting, so
    with the 0.06 default they read waiting 0.07-0.08 too high and as much too little
    working."""
    row = DATA2[name]
    solo = steady(DATA2, alone, DATA2[alone]["gpus"][0])
    alone_hollow = 1 - mean(solo, "sm_active") / mean(solo, "graphics")
    got = split(row["windows"], skip=row["skip"])
    for gpu, truth in row["truth"].items():
        xs = steady(DATA2, name, gpu)
        inside = 1 - mean(xs, "tensor") / (KAPPA * truth["working"])
        assert inside >= alone_hollow + 0.025, (gpu, inside, alone_hollow)
        assert 0.05 < got[gpu][WAITING] - truth[WAITING] < 0.1


def _rank(busy: float, sm: float, tensor: float, fp32: float = 0.0,
          nvlink: float = 0.0) -> Any:
    x = {"util": busy, "graphics": busy, "sm_active": sm, "sm_occupancy": 0.1,
         "tensor": tensor, "dram": 0.2, "fp16": 0.0, "fp32": fp32, "fp64": 0.0,
         "nvlink_rx": nvlink, "nvlink_tx": nvlink, "pcie_rx": 1e7, "pcie_tx": 5e6,
         "processes": 1, "peak_pcie": 63.016e9}
    w = window(x)
    return w, assess(w, ModelConfig())


def test_the_ceiling_is_the_least_waiting_ranks_room_for_its_gemms() -> None:
    """Each window: 1 - tensor / (0.955 x (kernel time - transfer)) of the rank that leaves
    the least room, clipped to 0..0.5; ranks stalled on their host (kernel time under 0.5)
    or not on the tensor pipes (an FP32 job) set none."""
    cfg = ModelConfig()
    nvlink = 9.5e9  # each way: 0.05 of the window at 190 GB/s
    straggler = _rank(0.95, 0.88, 0.84, nvlink=nvlink)
    waiter = _rank(0.97, 0.70, 0.62, nvlink=nvlink)
    got = ceiling_observation({"0": straggler, "1": waiter}, cfg)
    assert got == pytest.approx(1 - 0.84 / (KAPPA * (0.95 - 0.05)), abs=1e-6)
    assert ceiling_observation({"1": waiter}, cfg) == pytest.approx(
        1 - 0.62 / (KAPPA * (0.97 - 0.05)), abs=1e-6)
    stalled = _rank(0.3, 0.28, 0.27, nvlink=nvlink)
    assert ceiling_observation({"0": stalled}, cfg) is None
    fp32 = _rank(0.95, 0.9, 0.0, fp32=0.7, nvlink=nvlink)
    assert ceiling_observation({"0": fp32}, cfg) is None
    overfull = _rank(0.90, 0.90, 0.89, nvlink=nvlink)
    assert ceiling_observation({"0": overfull}, cfg) == 0.0


# Tried for issue 46 and rejected (docs/validation/split-own-hollow-h200.md, "What did not
# work"): read each window's own hollowness off its tensor rate per SM-active second, the
# collective's SM activity modelled explicitly. Per GPU and window, graphics G = C + M
# (compute and collective kernel time), SM active S = C (1 - r) + f M, tensor T = k C (1 - r),
# with r = 0.011 + 0.97 (1 - k) from the GEMMs alone and f the share of SMs a collective
# keeps active; solved for C, M and k.
SOLO_A, SOLO_B = 0.011, 0.97


def _explicit_collective(x: Mapping[str, Any], f: float) -> tuple[float, float]:
    """(compute kernel time, waiting) of one window under the rejected model: the k whose
    predicted SM activity is nearest the measured one, on a grid of 0.005."""
    g, s, t = x["graphics"], x["sm_active"], x["tensor"]
    best = (float("inf"), 0.0)
    for i in range(60, 201):
        k = i / 200
        compute = min(t / (k * (1 - SOLO_A - SOLO_B * (1 - k))), g)
        best = min(best, (abs(t / k + f * (g - compute) - s), compute))
    compute = best[1]
    return compute, max(g - compute - transfer_time(window(x), ModelConfig()), 0.0)


def _worst_under_explicit_collective(rows: Mapping[str, Any], name: str, f: float) -> float:
    row, worst = rows[name], 0.0
    for gpu, truth in row["truth"].items():
        got = [_explicit_collective(x, f) for x in steady(rows, name, gpu)]
        worst = max(worst, abs(statistics.mean(c for c, _ in got) - truth["working"]),
                    abs(statistics.mean(w for _, w in got) - truth[WAITING]))
    return worst


def test_no_collective_sm_share_passes_both_the_decode_step_and_rotating_imbalance() -> None:
    """The decode step (4096-square GEMMs, 256 KB all-reduces) reads best with the collective
    keeping no SM active at all and still fails (0.057: its GEMMs' tensor rate per SM-active
    second, 0.93, leaves room for 0.075 hollow by the GEMMs-alone relation, where the truth
    needs 0.10); rotating imbalance over 8192-square GEMMs (8 MiB all-reduces) needs 0.14-0.19.
    So no share f, constant or learned per job, passes both."""
    for f in (0.0, 0.05, 0.1, 0.15, 0.2):
        decode = _worst_under_explicit_collective(DATA2, "tp_decode", f)
        rotating = _worst_under_explicit_collective(DATA, "lost_rotating", f)
        assert max(decode, rotating) > TOLERANCE, f
    assert _worst_under_explicit_collective(DATA2, "tp_decode", 0.0) == pytest.approx(0.057,
                                                                                      abs=0.005)


def test_even_the_right_working_leaves_the_decode_steps_waiting_at_the_edge() -> None:
    """What no own-hollowness model can take out of the decode step's waiting, on the refined
    truth: its all-reduces' own time (0.036 of the window by the ranks' timing, 0.010 by their
    NVLink bytes: a 256 KB all-reduce is latency-bound) and GPM's graphics activity beyond the
    truth's resident time (0.022 / 0.015). With working exactly right, GPU 0 would read
    waiting +0.048 (GPU 1 +0.041)."""
    cfg = ModelConfig()
    edge = {}
    for gpu, truth in DATA2["tp_decode"]["truth"].items():
        xs = steady(DATA2, "tp_decode", gpu)
        moving = statistics.mean(transfer_time(window(x), cfg) for x in xs)
        waited = mean(xs, "graphics") - truth["working"] - moving
        edge[gpu] = waited - truth[WAITING]
        assert truth["transferring"] - moving == pytest.approx(0.026, abs=0.003)
    assert edge == pytest.approx({"0": 0.048, "1": 0.041}, abs=0.003)
