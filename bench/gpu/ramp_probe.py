"""[split]: do GEMMs that follow another kernel ramp up hollow? One GPU, no NCCL: bf16 GEMMs
back to back, then the same GEMMs each after a spacer (``torch.cuda._sleep``: one thread
spinning about ``--spacer-us``, resident like a collective's kernel with its SMs almost
empty), then spacers alone; a daemon's GPM counters (graphics, SM and tensor activity) beside
each phase's own counts and each kernel's time alone (CUDA events, launches queued ahead).
The extra resident time per spacer beyond both kernels' time alone is the ramp the job model
takes as ``collective_ramp_seconds``. Writes ``ramp-probe.json`` under ``--out``.

``python3 -m bench.gpu.ramp_probe --out DIR --metrics URL [--sizes 3072,4096]``
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

GAUGES = ("goodput_gpu_graphics_active_ratio", "goodput_gpu_sm_active_ratio",
          "goodput_gpu_tensor_active_ratio", "goodput_gpu_utilization_ratio")


class Sampler(threading.Thread):
    """Reads GPU 0's gauges from the daemon every 0.5 s, with the time read."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop = url, threading.Event()
        self.rows: list[tuple[float, dict[str, float]]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                text = urllib.request.urlopen(self.url, timeout=2).read().decode()
            except OSError:
                text = ""
            row = {}
            for line in text.splitlines():
                for name in GAUGES:
                    if line.startswith(name + "{") and 'gpu="0"' in line:
                        row[name] = float(line.rsplit(" ", 1)[1])
            self.rows.append((time.time(), row))
            self.stop.wait(0.5)


def alone(torch: Any, fn: Any, reps: int = 64) -> float:
    """Seconds one ``fn()`` takes with launches queued ahead of the GPU."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        torch.cuda._sleep(2_000_000)  # the host queues the launches meanwhile
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / 1000.0 / reps


def phase(torch: Any, seconds: float, step: Any) -> dict[str, float]:
    t0, steps = time.time(), 0
    while time.time() - t0 < seconds:
        for _ in range(32):
            step()
        steps += 32
        torch.cuda.synchronize()
    return {"start": t0, "end": time.time(), "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--sizes", default="3072,4096")
    ap.add_argument("--seconds", type=float, default=7.0)
    ap.add_argument("--spacer-us", type=float, default=10.0)
    args = ap.parse_args()
    import torch

    torch.cuda.set_device(0)
    clock_hz = torch.cuda.get_device_properties(0).clock_rate * 1e3 if hasattr(
        torch.cuda.get_device_properties(0), "clock_rate") else 1.98e9
    cycles = int(args.spacer_us * 1e-6 * clock_hz)
    sampler = Sampler(args.metrics)
    sampler.start()
    phases: list[dict[str, Any]] = []

    def spacer() -> None:
        torch.cuda._sleep(cycles)

    phases.append({"name": "spacers", "kernel_s": alone(torch, spacer),
                   **phase(torch, args.seconds, spacer)})
    for n in (int(s) for s in args.sizes.split(",")):
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)

        def gemm(a: Any = a, b: Any = b, c: Any = c) -> None:
            torch.mm(a, b, out=c)

        def spaced(gemm: Any = gemm) -> None:
            spacer()
            gemm()

        gemm_s = alone(torch, gemm)
        phases.append({"name": f"gemm_{n}", "n": n, "kernel_s": gemm_s,
                       **phase(torch, args.seconds, gemm)})
        phases.append({"name": f"spaced_{n}", "n": n, "kernel_s": gemm_s,
                       "spacer_s": phases[0]["kernel_s"], **phase(torch, args.seconds, spaced)})
        time.sleep(1.5)
    time.sleep(1.5)
    sampler.stop.set()
    sampler.join(5)
    for p in phases:  # the gauges of the daemon's windows well inside the phase
        rows = [r for t, r in sampler.rows if p["start"] + 2.5 <= t <= p["end"] + 0.5 and r]
        p["windows"] = len(rows)
        for name in GAUGES:
            vals = [r[name] for r in rows if name in r]
            p[name.removeprefix("goodput_gpu_").removesuffix("_ratio")] = (
                sum(vals) / len(vals) if vals else None)
        wall = p["end"] - p["start"]
        p["steps_per_second"] = p["steps"] / wall
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ramp-probe.json").write_text(json.dumps(
        {"spacer_cycles": cycles, "clock_hz": clock_hz, "phases": phases}, indent=1))
    for p in phases:
        print(json.dumps({k: (round(v, 7) if isinstance(v, float) else v) for k, v in p.items()
                          if k not in ("start", "end")}))


if __name__ == "__main__":
    main()
