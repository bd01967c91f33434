"""The time inside a rank's timed phases when no kernel of its own could run: the GPU had
reached the phase's opening event but the host had not yet launched the phase's first
operation (a collective launched from an idle GPU, a host that falls behind small kernels).

A rank's CUDA events bracket its phases (compute, comm, copy), so a phase's event time
includes such a launch gap; by the [split] truth the gap is the host's (no kernel resident).
:class:`LaunchGaps` measures it without perturbing the run: each step records one anchor
event while the stream is idle (it runs as the host records it), so every later event's GPU
time maps onto the host's clock; for each phase the host notes when it launched the phase's
first operation (the midpoint of the launching call) and, once the step's events are done,
the gap is that launch time minus the GPU time of the phase's opening event, where
positive. ``bench/gpu/split.py`` moves each phase's gaps to host time.

The launch time is the END of the launching call: a GEMM's or a collective's kernel is
launched at the end of its host call (torch's NCCL all-reduce first records and waits on
events, then launches), and the GPU reaches it no earlier. (The midpoint, used before,
under-read each gap by half the call, ~10-15 us for a collective: 0.05-0.07 of the time of a
tensor-parallel decode of 1024-square GEMMs at 4,500 collectives a second.)

Gaps between the kernels of one phase (a host that launches slower than the GPU runs small
kernels) are not seen by one opening event; :func:`alone_per_unit` times a phase's unit of work
with its launches queued ahead, so the truth caps a phase's kernel time at its units times
that (``Timer.units``).

(The CUDA profiler would see kernel spans directly, but its launch callbacks slow the host
enough to open gaps of their own: on a tensor-parallel decode step it read one rank's
collectives as 19 % resident and its peer's as 100 %, where the steady run is symmetric.)

Also :func:`queue_ahead`: a GPU-side sleep queued before a timed batch, so the host has
launched every operation of the batch before the GPU reaches the first one, and the batch
times the GPU's own work, not the host's launch path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def queue_ahead(torch: Any, cycles: int = 8_000_000) -> None:
    """Keep the current stream busy for ``cycles`` GPU clocks (4 ms at 2 GHz) while the host
    queues what follows."""
    torch.cuda._sleep(cycles)


class LaunchGaps:
    """One rank's launch gaps per phase, summed into a timer's totals as ``gap_<phase>``."""

    def __init__(self, timer: Any) -> None:
        self.timer = timer
        self.anchor: Any = None
        self.anchor_t = 0.0
        self.pending: list[tuple[str, Any, float]] = []

    def start(self) -> Any:
        """The step's first event, recorded on an idle stream: it runs as it is recorded."""
        ev = self.timer.torch.cuda.Event(enable_timing=True)
        ev.record()
        self.anchor, self.anchor_t = ev, time.perf_counter()
        return ev

    def launch(self, phase: str, opening: Any, call: Callable[[], Any]) -> Any:
        """Run ``call`` (which launches the phase's first operation) and note when it
        returned (the launch) against the phase's opening event."""
        out = call()
        self.pending.append((phase, opening, time.perf_counter()))
        return out

    def settle(self) -> None:
        """After the step's last event completed: add each gap to the timer's totals."""
        if self.anchor is None:
            self.pending.clear()
            return
        for phase, opening, launched in self.pending:
            gpu_at = self.anchor_t + self.anchor.elapsed_time(opening) / 1000.0
            gap = launched - gpu_at
            if gap > 0:
                key = f"gap_{phase}"
                self.timer.totals[key] = self.timer.totals.get(key, 0.0) + gap
        self.pending.clear()
        self.anchor = None


def alone_per_unit(torch: Any, work: Callable[[int], None], count: int, reps: int = 2) -> float:
    """Seconds one unit of ``work`` (``work(n)`` launches n units) takes on the GPU with its
    launches queued ahead, the best of ``reps`` batches of ``count``: the kernels' own time,
    whatever the host's launch rate (the stream must be idle)."""
    best = float("inf")
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        queue_ahead(torch, 4_000_000)
        start.record()
        work(count)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1000.0 / max(count, 1))
    return best
