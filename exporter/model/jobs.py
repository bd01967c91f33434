"""Stragglers by comparison: the GPUs of one job judged against each other.

In a synchronous job (data parallel, tensor parallel, a pipeline) every rank's step lasts as
long as the slowest rank's. A rank that finishes early does not go idle: it enters the next
collective, whose kernel stays resident and spins until the last rank arrives. So the time
a GPU waits on its peers is kernel time that does no work: *hollow* time, kernel time minus
SM active. The rank everyone waits for has the least of it (it works, or it is stalled on
its host with no kernel resident at all); each other rank's excess over it, scaled by how
few SMs a spinning collective occupies, is the share of time it waited.

Measured on two H200 (docs/validation/jobs-h200.md): excess hollow time 0.66 / 0.26 / 0.17
for a peer doing 5x / 25 % / 10 % more work, 0.79 for a peer stalled on its host, under 0.03
for a balanced pair or DDP; the waited shares it gives are checked there against the ranks'
own CUDA-event truth.

Where it can be fooled (docs/efficiency.md): hollow kernels that are not collectives (a rank
launching tiny kernels next to a peer that computes) read as waiting when link counters are
unknown; a GPU shared with another job's kernels; peers on other nodes are judged by the
rules, not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.config import ModelConfig
from exporter.model.core import (
    ALLOCATED_IDLE,
    COMPUTE_BOUND,
    HOST_BOUND,
    IDLE,
    LAUNCH_BOUND,
    TRANSFER_BOUND,
    UNKNOWN,
    Assessment,
    Window,
    bus_fed,
    kernel_time,
)

CAN_WAIT = frozenset({LAUNCH_BOUND, HOST_BOUND, COMPUTE_BOUND, "memory_bound", "comm_wait"})
"""Regimes a waiting rank can show on its own: spinning reads launch_bound (hollow), a
mostly-waiting rank with some GEMMs compute_bound."""
CAN_HOLD_BACK = CAN_WAIT | {ALLOCATED_IDLE}
"""A rank stalled on its host can have no kernel resident at all: allocated_idle."""


def hollow(w: Window, a: Assessment) -> float | None:
    """Kernel time not backed by SM activity, 0..1; None when profiling cannot tell."""
    if not w.profiling_available or a.regime in (UNKNOWN, IDLE, TRANSFER_BOUND):
        return None
    busy = kernel_time(w, usable=True)
    if busy is None or w.sm_active is None:
        return None
    return max(busy - w.sm_active, 0.0)


def exchanging(w: Window, cfg: ModelConfig) -> bool:
    """The GPU moves data over a link (a collective's traffic), or its links are not read."""
    unknown = w.nvlink_bytes_per_second is None and not w.bus_bytes_per_second
    return unknown or bus_fed(w, cfg) or (
        (w.nvlink_bytes_per_second or 0.0) >= cfg.bus_floor_bytes_per_second
    )


def spin_sm_active(w: Window, cfg: ModelConfig) -> float:
    """SM active of this GPU's kernel while it spins waiting: a collective (all-reduce: data
    both ways on the links) keeps several SMs resident, a point-to-point send or receive
    (data one way: a pipeline stage) almost none."""
    rates: dict[str, float] = {}
    for _link, direction, rate in w.bus_bytes_per_second:
        rates[direction] = rates.get(direction, 0.0) + max(rate, 0.0)
    rx, tx = rates.get("rx", 0.0), rates.get("tx", 0.0)
    one_way = max(rx, tx) >= cfg.bus_floor_bytes_per_second and min(rx, tx) < 0.1 * max(rx, tx)
    return min(cfg.p2p_sm_active if one_way else cfg.collective_sm_active, 0.99)


@dataclass
class JobTracker:
    """Smoothed hollow time per GPU of one job, and the straggler it names (hysteresis)."""

    smoothed: dict[str, float]
    straggler: str = ""

    def update(self, gpu: str, value: float, seconds: float, cfg: ModelConfig) -> float:
        """Exponential average with time constant ``straggler_window_seconds``."""
        alpha = min(seconds / max(cfg.straggler_window_seconds, 1e-9), 1.0)
        old = self.smoothed.get(gpu)
        new = value if old is None else old + alpha * (value - old)
        self.smoothed[gpu] = new
        return new


@dataclass(frozen=True)
class JobJudgement:
    straggler: str
    waiting: frozenset[str]
    waited_share: Mapping[str, float]
    """gpu -> estimated share of the window it waited on its peers (0 for the straggler)."""


def judge(
    job: Mapping[str, tuple[Window, Assessment]],
    tracker: JobTracker,
    seconds: float,
    cfg: ModelConfig,
) -> JobJudgement:
    """Compare the job's GPUs: the one with the least smoothed hollow time holds the others
    back when some peer exceeds it by ``straggler_gap`` while exchanging data."""
    levels: dict[str, float] = {}
    now: dict[str, float] = {}
    for gpu, (w, a) in job.items():
        h = hollow(w, a)
        if h is not None and a.regime in CAN_HOLD_BACK:
            now[gpu] = h
            levels[gpu] = tracker.update(gpu, h, seconds, cfg)
    for gone in set(tracker.smoothed) - set(levels):
        tracker.smoothed.pop(gone)
    if len(levels) < 2:
        tracker.straggler = ""
        return JobJudgement("", frozenset(), {g: 0.0 for g in job})
    low = min(levels, key=lambda g: (levels[g], g))
    kept = tracker.straggler
    if kept in levels and levels[kept] - levels[low] < cfg.straggler_gap / 2:
        low = kept  # keep the one named while it is about as low as the lowest
    excess = {g: max(levels[g] - levels[low], 0.0) for g in levels}
    waiting_on = {
        g for g in excess
        if g != low and job[g][1].regime in CAN_WAIT and exchanging(job[g][0], cfg)
    }
    named = tracker.straggler == low
    threshold = cfg.straggler_gap / 2 if named else cfg.straggler_gap
    waiting = frozenset(g for g in waiting_on if excess[g] >= threshold)
    tracker.straggler = low if waiting else ""
    # Who waits on whom comes from the smoothed levels; how long, from this window's own
    # values: a job that just started is counted at once, not as the average catches up.
    shares = {g: min(max(now[g] - now[low], 0.0) / (1.0 - spin_sm_active(job[g][0], cfg)), 1.0)
              if g in waiting_on else 0.0 for g in job}
    return JobJudgement(tracker.straggler, waiting, shares)
