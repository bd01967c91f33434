"""How much of a rank's CUDA-event time had a kernel of its own resident.

A rank's events bracket its phases (compute, comm, copy), but an interval can hold time in
which no kernel of the rank runs: a collective launched from an idle GPU waits for the host
to get through the framework's launch path, a stream waits for another. By the [split]
truth that time is the host's (no kernel resident), so the ranks measure it: for a short
calibration the steps run under the CUDA profiler (CUPTI activity records: every kernel's
and copy's start and end on the GPU), and each phase's *resident ratio* is the union of its
kernels' spans over its event time in the same steps. ``bench/gpu/split.py`` moves the rest
of each phase to host time.

Also :func:`queue_ahead`: a GPU-side sleep queued before a timed batch, so the host has
launched every operation of the batch before the GPU reaches the first one, and the batch
times the GPU's own work, not the host's launch rate.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

NCCL = "nccl"


def queue_ahead(torch: Any, cycles: int = 8_000_000) -> None:
    """Keep the current stream busy for ``cycles`` GPU clocks (4 ms at 2 GHz) while the host
    queues what follows."""
    torch.cuda._sleep(cycles)


def _union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def kernel_spans(trace: dict[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """Microsecond spans from a Chrome trace of the CUDA profiler, by phase: NCCL kernels
    (comm), device copies (copy), any other kernel (compute); tiny fills that set a flag
    from the host are left out (they run outside every timed phase)."""
    out: dict[str, list[tuple[float, float]]] = {"compute": [], "comm": [], "copy": []}
    for e in trace.get("traceEvents", []):
        cat, name = e.get("cat", ""), str(e.get("name", ""))
        if e.get("ph") != "X" or "dur" not in e:
            continue
        span = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        if cat == "kernel":
            if NCCL in name.lower():
                out["comm"].append(span)
            elif "fill" not in name.lower():
                out["compute"].append(span)
        elif cat == "gpu_memcpy" and float(e["dur"]) > 50.0:  # not the flag's 8-byte copies
            out["copy"].append(span)
    return out


def calibrate(torch: Any, timer: Any, run_step: Callable[[bool], bool], rank: int,
              seconds: float = 1.5) -> dict[str, Any]:
    """Run steps under the profiler for about ``seconds`` (rank 0 decides when to stop;
    ``run_step(want_stop) -> stopped`` ends every rank at the same step) and return each
    phase's resident ratio (1.0 where the phase took no event time) with what it was
    measured over. Any failure of the profiler returns ``{"error": ...}``: no correction."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError as exc:
        return {"error": f"no profiler: {exc}"}
    before = dict(timer.totals)
    steps = 0
    t0 = time.monotonic()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            while True:
                steps += 1
                want = rank == 0 and (time.monotonic() - t0 >= seconds and steps >= 5)
                if run_step(want):
                    break
        torch.cuda.synchronize()
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
        finally:
            os.unlink(path)
    except Exception as exc:  # the truth stays uncorrected, saying why
        return {"error": f"{type(exc).__name__}: {exc}", "steps": steps}
    spans = kernel_spans(trace)
    out: dict[str, Any] = {"steps": steps, "seconds": round(time.monotonic() - t0, 3)}
    for phase in ("compute", "comm", "copy"):
        event_s = timer.totals.get(phase, 0.0) - before.get(phase, 0.0)
        resident_s = _union(spans[phase]) / 1e6
        out[f"{phase}_event_s"] = round(event_s, 6)
        out[f"{phase}_resident_s"] = round(resident_s, 6)
        out[phase] = round(min(resident_s / event_s, 1.0), 4) if event_s > 1e-4 else 1.0
    return out
