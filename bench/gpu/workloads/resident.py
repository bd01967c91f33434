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
        """Run ``call`` (which launches the phase's first operation) and note its midpoint
        against the phase's opening event."""
        t0 = time.perf_counter()
        out = call()
        self.pending.append((phase, opening, (t0 + time.perf_counter()) / 2))
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
