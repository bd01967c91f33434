"""One holder of a shared GPU for the [shared-gpu] validation (issue 50): a GEMM loop, a
tiny-kernel loop (busy but unproductive) or a process that holds memory and idles, each
timing its own kernels with CUDA events.

Phases on the wall clock the harness hands out (``time.time()`` seconds):
``--calib-at``..+``--calib-seconds``: the process runs alone (the harness staggers them) and
times each batch with a pair of CUDA events: its solo batch time ``solo_ms``, and its kernel
time alone (sum of batch spans / wall time) ``solo_busy``. From ``--go`` to ``--stop`` it runs
beside the others and writes one JSON line per wall second: batches finished, the sum of
their event spans. Its own kernel-time share in that second is ``batches x solo_ms / 1000``:
under time-slicing a batch's span also holds the neighbours' slices, so the span overstates
and the solo-calibrated count does not.

    python3 -m bench.gpu.workloads.shared --mode gemm --out /tmp/gemm.jsonl \
        --calib-at T --calib-seconds 3 --go T2 --stop T3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any


def _batch(mode: str, torch: Any) -> Any:
    """A callable running one batch of the mode's kernels on the current stream."""
    if mode == "gemm":
        n = 8192
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        return lambda: torch.matmul(a, b, out=c)
    x = torch.zeros(256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            x.add_(1.0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(1000):  # 1000 elementwise kernels on 256 floats: SMs all but empty
            x.add_(1.0)
    return graph.replay


class Timer:
    """Batches bracketed by CUDA events, at most ``depth`` in flight; spans read back as
    they complete."""

    def __init__(self, torch: Any, depth: int = 4) -> None:
        self.torch = torch
        self.depth = depth
        self.pending: list[tuple[Any, Any]] = []
        self.done: list[float] = []

    def run(self, batch: Any) -> None:
        start = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        start.record()
        batch()
        end.record()
        self.pending.append((start, end))
        while len(self.pending) > self.depth:
            self._finish(self.pending.pop(0))

    def _finish(self, pair: tuple[Any, Any]) -> None:
        start, end = pair
        end.synchronize()
        self.done.append(start.elapsed_time(end))

    def drain(self) -> list[float]:
        for pair in self.pending:
            self._finish(pair)
        self.pending = []
        out, self.done = self.done, []
        return out


def _sleep_until(t: float) -> None:
    while (left := t - time.time()) > 0:
        time.sleep(min(left, 0.05))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("gemm", "tiny", "idle"), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--calib-at", type=float, default=0.0)
    p.add_argument("--calib-seconds", type=float, default=3.0)
    p.add_argument("--go", type=float, required=True)
    p.add_argument("--stop", type=float, required=True)
    p.add_argument("--hold-gib", type=float, default=8.0)
    p.add_argument("--dry", action="store_true", help="no GPU: the phases with made-up spans")
    args = p.parse_args()
    out = open(args.out, "w", buffering=1)  # noqa: SIM115 - one line per second until stop

    def emit(**row: Any) -> None:
        out.write(json.dumps({"mode": args.mode, "pid": os.getpid(), **row}) + "\n")

    if args.dry:
        _dry(args, emit)
        return
    import torch

    held = torch.empty(int(args.hold_gib * (1 << 30)), dtype=torch.uint8, device="cuda")
    held.fill_(1)
    torch.cuda.synchronize()
    if args.mode == "idle":
        emit(event="ready", t=time.time(), held_bytes=held.numel())
        _sleep_until(args.stop)
        emit(event="end", t=time.time())
        return
    batch = _batch(args.mode, torch)
    for _ in range(3):
        batch()
    torch.cuda.synchronize()
    emit(event="ready", t=time.time(), held_bytes=held.numel())
    timer = Timer(torch)
    _sleep_until(args.calib_at)
    began = time.time()
    while time.time() < began + args.calib_seconds:
        timer.run(batch)
    spans = timer.drain()
    wall = time.time() - began
    solo_ms = statistics.median(spans) if spans else 0.0
    emit(event="calibrated", t=time.time(), batches=len(spans), solo_ms=solo_ms,
         solo_busy=sum(spans) / 1000.0 / wall if wall > 0 else 0.0, wall=wall)
    _sleep_until(args.go)
    second = int(time.time())
    count, span = 0, 0.0
    while time.time() < args.stop:
        timer.run(batch)
        if len(timer.done) >= 8 or int(time.time()) != second:
            finished = timer.done
            timer.done = []
            count += len(finished)
            span += sum(finished)
        now = int(time.time())
        if now != second:
            emit(event="second", t=float(second), batches=count, span_ms=span,
                 own_share=count * solo_ms / 1000.0)
            second, count, span = now, 0, 0.0
    timer.drain()
    emit(event="end", t=time.time())


def _dry(args: argparse.Namespace, emit: Any) -> None:
    """The harness's plumbing without a GPU: the same lines, half the time each second."""
    emit(event="ready", t=time.time(), held_bytes=0)
    if args.mode != "idle":
        _sleep_until(args.calib_at + args.calib_seconds)
        emit(event="calibrated", t=time.time(), batches=100, solo_ms=1.0, solo_busy=1.0, wall=3)
    _sleep_until(args.go)
    while time.time() < args.stop:
        second = int(time.time())
        _sleep_until(second + 1)
        if args.mode != "idle":
            emit(event="second", t=float(second), batches=500, span_ms=500.0, own_share=0.5)
    emit(event="end", t=time.time())


if __name__ == "__main__":
    main()
