"""The time split replayed on issue 46's final run on four H200 (split2-bench, this session;
docs/validation/split-h200.md): every 1 s window one daemon published per GPU beside each
rank's CUDA-event truth for every part, with the truth's compute capped at its kernels' time
alone (``bench/gpu/workloads/resident.py``). Call A (``h200-split2-final-a-windows.json``):
llama-server over GPUs 0,1 beside a bursty minute, then the issue's shapes, this bench's own
and tensor-parallel decode steps of GEMMs from 1024- to 8192-square; call B
(``h200-split2-final-b-windows.json``): the eight [lost] rows as 4-GPU jobs. The daemon ran
split2-model 933b133, the model replayed here; the replay agrees with the live figure to
0.02 on every row but two (the checkpoint and the late joiner, tested on their own below).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from exporter.model.jobs import PARTS, TRANSFERRING, WAITING
from tests.test_model_split_h200 import split, utilization_against_truth

FIXTURES = Path(__file__).parent / "fixtures" / "jobs"
ROWS: Mapping[str, Any] = {
    **json.loads((FIXTURES / "h200-split2-final-a-windows.json").read_text())["rows"],
    **json.loads((FIXTURES / "h200-split2-final-b-windows.json").read_text())["rows"],
}
TOLERANCE = 0.05
LIVE_PASSING = (
    "checkpoint", "jitter", "tiny_sync", "fp32_allgather", "fp16_reduce_scatter",
    "broadcast_skew", "sendrecv_membound", "h2d_loader", "shape_tp_bf16_8192",
    "shape_tp_fp32_2048", "shape_tp_fp32_4096", "lost_rotating", "lost_pipeline_gpipe",
    "lost_straggler_10pct", "lost_host_stall", "lost_late_joiner", "lost_balanced",
    "lost_comm_heavy", "lost_back_to_back")
"""Rows whose live split was within the tolerance on every part of every GPU (with the bursty
minute, 20 of the 24 judged rows). Outside it: tp_decode (waiting +0.07) and the decode steps
of 1024-, 2048- and 3072-square GEMMs (waiting +0.06 to +0.12): hollow time of small GEMMs
and latency-bound collectives read as waiting."""
REPLAY_PASSING = tuple(n for n in LIVE_PASSING if n not in ("checkpoint", "lost_late_joiner"))


def _worst(got: Mapping[str, Mapping[str, float]], row: Mapping[str, Any]
           ) -> tuple[float, str]:
    return max((abs(got[g][p] - t[p]), f"GPU {g} {p}: {got[g][p]:.3f} vs {t[p]:.3f}")
               for g, t in row["truth"].items() for p in PARTS)


@pytest.mark.parametrize("name", LIVE_PASSING)
def test_the_live_split_of_the_final_run_is_within_tolerance(name: str) -> None:
    """What the live daemon published (the rate of goodput_gpu_job_seconds_total{part} over
    the steady windows, recorded in the fixture): the figures of the report."""
    row = ROWS[name]
    worst, where = _worst(row["exporter"], row)
    assert worst <= TOLERANCE, f"{name} {where}"
    for gpu in row["gpus"]:
        assert row["exporter"][gpu]["sum"] == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("name", REPLAY_PASSING)
def test_the_model_replayed_on_the_final_run_is_within_tolerance(name: str) -> None:
    row = ROWS[name]
    got = split(row["windows"], skip=row["skip"])
    for gpu in row["gpus"]:
        assert sum(got[gpu].values()) == pytest.approx(1.0, abs=1e-9)
    worst, where = _worst(got, row)
    assert worst <= TOLERANCE, f"{name} {where}"


def test_a_late_joiner_on_four_gpus_from_its_first_whole_window() -> None:
    """Judged from the ranks' start, the replay's first window straddles the start (host
    +0.057 there); from the first whole window every part is within the tolerance."""
    row = ROWS["lost_late_joiner"]
    worst, where = _worst(split(row["windows"], skip=1.0), row)
    assert worst <= TOLERANCE, where


def test_a_checkpoint_is_host_time_not_a_transfer() -> None:
    """Both ranks copy 1 GiB to the host every 4 s, then write it for 1 s: host_stalled
    0.29-0.35 by the ranks' timing, transferring 0.03. A 15 s row holds four checkpoints, so
    where a window's edge falls moves a rank's truth by a few hundredths; the replay's mean
    of windows reads host 0.285-0.292 and transfer 0.042 on both GPUs."""
    row = ROWS["checkpoint"]
    got = split(row["windows"], skip=row["skip"])
    for gpu, truth in row["truth"].items():
        assert got[gpu][TRANSFERRING] == pytest.approx(truth[TRANSFERRING], abs=TOLERANCE)
        assert got[gpu]["host_stalled"] >= 0.25
        assert got[gpu]["working"] == pytest.approx(truth["working"], abs=TOLERANCE)


def test_a_tensor_parallel_decode_has_its_collective_time_not_its_split() -> None:
    """tp_decode (8 x (4096-square GEMM, 256 KB all-reduce) a step): working, host_stalled
    and the collective time (waiting + transferring) are within the tolerance; inside the
    collective, transfer reads 0.01 (NVLink bytes over the link's rate) where the
    collectives alone take 0.04 (latency-bound), and the rest goes to waiting (+0.07)."""
    row = ROWS["tp_decode"]
    got = split(row["windows"], skip=row["skip"])
    for gpu, truth in row["truth"].items():
        assert got[gpu][WAITING] + got[gpu][TRANSFERRING] == pytest.approx(
            truth[WAITING] + truth[TRANSFERRING], abs=TOLERANCE)
        for part in ("working", "host_stalled"):
            assert got[gpu][part] == pytest.approx(truth[part], abs=TOLERANCE)
        assert got[gpu][WAITING] - truth[WAITING] > TOLERANCE


def test_llama_servers_gpus_are_its_own_job_beside_one_gpu_loads() -> None:
    """During call A's first slot llama-server (started as a service: its session's leader,
    parent init) served over GPUs 0,1 while the bench's bursty load ran on GPU 2 and small
    GEMMs on GPU 3, each in a child of a session of its own. The daemon judged no job over
    GPU 2 or 3 with the engine's GPUs, so no one-GPU load's time counts in its split."""
    for name in ("bursty", "solo_small"):
        assert ROWS[name]["exporter"] == {ROWS[name]["gpus"][0]: {}}


def test_a_bursty_minute_of_utilization_matches_kernel_time() -> None:
    """Over a minute of 8192-square GEMM bursts between 0.2-1 s host stalls, NVML's samples
    averaged as the exporter publishes them are within 0.01 of the rank's kernel time in
    every window (each judged over the span its samples cover) and within 0.005 on average."""
    row = ROWS["bursty"]
    got, want = utilization_against_truth(row)
    assert len(got) >= 55
    assert statistics.mean(got) == pytest.approx(statistics.mean(want), abs=0.005)
    assert max(abs(g - t) for g, t in zip(got, want, strict=True)) <= 0.01


# With NCCL's count of collectives --------------------------------------------------------------
# The same windows replayed with what NCCL's RAS would have said of each GPU: the ranks' own
# collectives per second (steps per second times the collectives of a step: the row's rounds
# of its collective, the 2-float stop flag; a point-to-point exchange is not a collective to
# NCCL). The live run with the NCCL source is tests/test_model_split3_h200.py.


def collectives_per_step(info: Mapping[str, Any]) -> int:
    if info.get("kind") != "split_job":
        return 1 + int(info.get("rounds", 1))  # the [lost] jobs: their all-reduces, the flag
    coll = info.get("coll") or "none"
    return 1 + (0 if coll in ("none", "sendrecv") else int(info.get("rounds", 1)))


def counted(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The row's windows, each busy GPU with ``collectives`` from the ranks' steps."""
    per_step = collectives_per_step(row["info"])
    out = []
    for w in row["windows"]:
        gpus = {}
        for gpu, x in w["gpus"].items():
            steps = row["truth"].get(gpu, {}).get("steps_per_second")
            busy = steps and (x.get("graphics") or 0.0) > 0.02
            gpus[gpu] = {**x, "collectives": steps * per_step if busy else None}
        out.append({**w, "gpus": gpus})
    return out


COUNTED_PASSING = (*REPLAY_PASSING, "tp_decode", "shape_tp_bf16_2048", "shape_tp_bf16_3072")


@pytest.mark.parametrize("name", COUNTED_PASSING)
def test_with_ncclss_count_every_row_is_within_tolerance(name: str) -> None:
    """With the count, a latency-bound collective's own time is transfer and the GEMMs
    next to it ramp up hollow: tp_decode's waiting +0.073 -> within 0.023 of the truth on
    every part, the 3072-square decode step's +0.107 -> 0.016, the 2048-square's 0.050; the
    rows that passed still pass."""
    row = ROWS[name]
    got = split(counted(row), skip=row["skip"])
    worst, where = _worst(got, row)
    assert worst <= TOLERANCE, f"{name} {where}"


def test_with_nccls_count_a_decode_steps_collective_time_is_transfer() -> None:
    """tp_decode: 8 x 256 KB all-reduces and the flag a step, 452 steps a second: 4,069
    collectives a second at 9 us each is 0.037 of the window, against 0.039 by the ranks'
    timing of the collectives alone (0.011 from NVLink bytes over the link's rate)."""
    row = ROWS["tp_decode"]
    got = split(counted(row), skip=row["skip"])
    for gpu, truth in row["truth"].items():
        assert got[gpu][TRANSFERRING] == pytest.approx(truth[TRANSFERRING], abs=0.005)
        assert got[gpu][WAITING] == pytest.approx(truth[WAITING], abs=0.02)


def test_the_1024_square_decode_step_stays_outside_with_the_count() -> None:
    """The one decode step still outside the tolerance: 1024-square GEMMs of 5 us, launched
    slower than they run, between collectives. The count halves its waiting error (+0.118
    -> +0.068 on GPU 1), but GPM's graphics activity reads 0.03 more kernel time than the
    ranks' events (0.516 against 0.486) and its GEMMs are too small for a ramp per
    collective to describe them (the ramp is capped at their SMs' work)."""
    row = ROWS["shape_tp_bf16_1024"]
    before, _ = _worst(split(row["windows"], skip=row["skip"]), row)
    worst, where = _worst(split(counted(row), skip=row["skip"]), row)
    assert TOLERANCE < worst < 0.07 < before, where
