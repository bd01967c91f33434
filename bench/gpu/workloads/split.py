"""Workloads of the [split] run (``bench/gpu/split.py``): jobs whose ranks time every part of
where their GPU time goes, so the exporter's split (working / transferring / waiting /
host_stalled / idle) can be checked part by part.

The truth, per rank, from CUDA events on the rank's own stream (each step ends with the
stream drained, so event intervals never overlap one another or host time):

- **compute**: from before its first kernel of a round to after its last (its own GEMMs or
  memory-bound kernels; their own launch gaps and hollow SMs included);
- **comm**: from after its compute to after its collective or send/receive returned on the
  stream, waiting for a late peer included; the per-step stop flag (a 2-float all-reduce)
  too;
- **copy**: device-to-host and host-to-device copies (a checkpoint's state, a loader's batch);
- **pure comm per step**: the same collectives timed back to back after a barrier, no compute
  and no rank late (the transfer alone, latency included);
- **launch gaps**: inside those phases, the time the GPU had reached a phase's opening event
  before the host had launched its first operation (``resident.py``): no kernel of its own
  could run, so it is host time;
- **kernels alone**: each unit of compute (a GEMM, a memory-bound pass) timed with its
  launches queued ahead, at the start and every truth line; a phase's compute time is capped
  at its units times that (the GPU idles between small kernels a host launches slower than
  they run: host time too);
- **host**: wall time not covered by any phase, plus the launch gaps (no kernel of its own
  resident: a checkpoint's write, a data loader's delay, Python between steps, a
  collective launched from an idle GPU);
- **collectives**: every NCCL collective the rank launches, counted at the call
  (``counted.py``: each round's all-reduce, all-gather, reduce-scatter, broadcast or tiny
  all-reduce, and the stop flag's; a batched isend/irecv exchange is point-to-point, not one),
  on every truth line beside the real seconds since the origin (``clock_s``), so the exporter's
  NCCL-counted rate can be checked against it.

:func:`bench.gpu.split.parts` turns them into the split (each phase less its launch gaps):
working = compute, transferring = min(comm, pure comm) + copy, waiting = comm - pure comm,
host_stalled = host, idle = 0 (a job's GPU has its process); the parts sum to 1 by
construction. One process per GPU (NCCL),
``python3 -m bench.gpu.workloads split_job --coll all_reduce --coll-kib 256 ...``; NVLink
multicast stays off (``core.NO_MULTICAST``).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from typing import Any

from bench.gpu.workloads.core import (
    Family,
    Runner,
    Stop,
    device_info,
    emit,
    idle_dry_run,
    join_ranks,
    load_torch,
    spawn_ranks,
)
from bench.gpu.workloads.counted import CountedDist, aside
from bench.gpu.workloads.jobs import Timer
from bench.gpu.workloads.resident import LaunchGaps, queue_ahead

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv", "tiny",
               "none")
DTYPES = ("bf16", "fp16", "fp32")


class SplitTimer(Timer):
    """The jobs timer with a ``copy`` phase (D2H / H2D copies, timed by events)."""

    def reset(self) -> None:
        super().reset()
        self.totals["copy"] = 0.0


class Job:
    """One rank's share of a job: its work unit, its collective, its host habits."""

    def __init__(self, torch: Any, dist: Any, rank: int, world: int, args: argparse.Namespace,
                 dev: Any) -> None:
        self.torch, self.dist, self.rank, self.world, self.args = torch, dist, rank, world, args
        self.rng = random.Random(args.seed * 1000 + rank)
        self.steps = 0
        self.gaps: LaunchGaps | None = None
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
        if args.dtype == "fp32":
            torch.backends.cuda.matmul.allow_tf32 = False  # FP32 pipes, no tensor cores
        n = args.gemm_n
        self.a = torch.randn(n, n, device=dev, dtype=dtype)
        self.b = torch.randn(n, n, device=dev, dtype=dtype)
        self.c = torch.empty(n, n, device=dev, dtype=dtype)
        self.mem = (torch.ones(args.mem_mib * 2**20 // 4, device=dev, dtype=torch.float32)
                    if args.mem_mib > 0 else None)
        elems = max(args.coll_kib * 1024 // 4, world)
        elems -= elems % world
        self.full = torch.ones(elems, device=dev, dtype=torch.float32)
        self.part = torch.ones(elems // world, device=dev, dtype=torch.float32)
        self.recv = torch.empty(elems, device=dev, dtype=torch.float32)
        self.tiny = torch.ones(1, device=dev, dtype=torch.float32)
        self.flag = torch.zeros(2, device=dev, dtype=torch.float32)
        self.h2d = None
        if args.h2d_mib > 0:
            self.h2d = (torch.ones(args.h2d_mib * 2**20, dtype=torch.uint8).pin_memory(),
                        torch.empty(args.h2d_mib * 2**20, device=dev, dtype=torch.uint8))
        self.ckpt = None
        if args.ckpt_every_s > 0:
            size = args.ckpt_mib * 2**20
            self.ckpt = (torch.ones(size, device=dev, dtype=torch.uint8),
                         torch.empty(size, dtype=torch.uint8).pin_memory())
            self.last_ckpt = time.monotonic()

    # --- the pieces of a step ---------------------------------------------------------------

    def count(self) -> int:
        """Work units this rank runs this step (the heavy rank (1 + extra) times as many)."""
        a = self.args
        heavy = (a.heavy == "static" and self.rank == a.heavy_rank % self.world) or (
            a.heavy == "rotating" and self.steps % self.world == self.rank)
        return round(float(a.gemms) * (1.0 + float(a.extra))) if heavy else int(a.gemms)

    def work(self, count: int) -> None:
        if self.mem is not None:
            for _ in range(count):
                self.mem.mul_(1.0000001)  # memory-bound: read and write the whole buffer
            return
        for _ in range(count):
            self.torch.matmul(self.a, self.b, out=self.c)

    def collective(self) -> None:
        d, kind = self.dist, self.args.coll
        if kind == "all_reduce":
            d.all_reduce(self.full)
        elif kind == "all_gather":
            d.all_gather_into_tensor(self.full, self.part)
        elif kind == "reduce_scatter":
            d.reduce_scatter_tensor(self.part, self.full)
        elif kind == "broadcast":
            d.broadcast(self.full, src=0)
        elif kind == "sendrecv":
            peer_to, peer_from = (self.rank + 1) % self.world, (self.rank - 1) % self.world
            ops = [d.P2POp(d.isend, self.full, peer_to), d.P2POp(d.irecv, self.recv, peer_from)]
            for req in d.batch_isend_irecv(ops):
                req.wait()
        elif kind == "tiny":
            d.all_reduce(self.tiny)

    def step(self, timer: SplitTimer) -> None:
        """One step: a loader's host delay, its batch copied in, ``rounds`` x (work, then
        the collective), the stream drained (as ``loss.item()`` does). Each phase's launch
        gap (resident.py) is measured against the step's anchor event."""
        a = self.args
        if a.jitter_ms > 0:
            time.sleep(self.rng.uniform(0.0, a.jitter_ms / 1000.0))
        gaps = self.gaps_of(timer)
        marks: list[tuple[str, Any, Any]] = []
        prev = gaps.start()
        if self.h2d is not None:
            host, dev = self.h2d
            gaps.launch("copy", prev, lambda: dev.copy_(host, non_blocking=True))
            marks.append(("copy", prev, timer.event()))
            prev = marks[-1][2]
        count = self.count()
        for _ in range(max(a.rounds, 1)):
            e0 = prev
            gaps.launch("compute", e0, lambda: self.work(1))
            self.work(count - 1)
            timer.units(count)
            e1 = timer.event()
            marks.append(("compute", e0, e1))
            prev = e1
            if a.coll != "none" and self.dist is not None:
                gaps.launch("comm", e1, self.collective)
                prev = timer.event()
                marks.append(("comm", e1, prev))
        marks[-1][2].synchronize()
        for phase, e0, e1 in marks:
            timer.add(phase, e0, e1)
        gaps.settle()
        self.steps += 1

    def gaps_of(self, timer: SplitTimer) -> LaunchGaps:
        if self.gaps is None or self.gaps.timer is not timer:
            self.gaps = LaunchGaps(timer)
        return self.gaps

    def one(self, timer: SplitTimer, want: bool) -> bool:
        """A step and its end; True when every rank stops here."""
        self.step(timer)
        return self.end_of_step(timer, want)

    def end_of_step(self, timer: SplitTimer, want: bool) -> bool:
        """Stop flag and checkpoint flag in one 2-float all-reduce (every rank stops, and
        checkpoints, at the same step; rank 0 keeps the checkpoint clock); then the
        checkpoint: its state copied to pinned host memory, then written on the host."""
        due = self.ckpt is not None and self.rank == 0 and (
            time.monotonic() - self.last_ckpt >= self.args.ckpt_every_s)
        self.flag[0], self.flag[1] = (1.0 if want else 0.0), (1.0 if due else 0.0)
        if self.dist is not None:
            gaps = self.gaps_of(timer)
            e0 = gaps.start()
            gaps.launch("comm", e0, lambda: self.dist.all_reduce(
                self.flag, op=self.dist.ReduceOp.MAX))
            e1 = timer.event()
            stop, ckpt = self.flag.tolist()
            timer.add("comm", e0, e1)
            gaps.settle()
        else:
            stop, ckpt = self.flag.tolist()
        if ckpt > 0 and self.ckpt is not None:
            self.checkpoint(timer)
        return bool(stop > 0)

    def checkpoint(self, timer: SplitTimer) -> None:
        state, host = self.ckpt  # type: ignore[misc]
        gaps = self.gaps_of(timer)
        e0 = gaps.start()
        gaps.launch("copy", e0, lambda: host.copy_(state, non_blocking=True))
        e1 = timer.event()
        e1.synchronize()
        timer.add("copy", e0, e1)
        gaps.settle()
        self.last_ckpt = time.monotonic()
        write_for(host, self.args.ckpt_host_s, f"/tmp/split-ckpt-{os.getpid()}.bin")

    # --- the transfer alone -----------------------------------------------------------------

    def pure_comm(self, queued: bool = True, reps: int = 5, batch: int = 20) -> float:
        """Seconds one step's communication takes with no rank late: each collective after a
        barrier, ``batch`` back to back with no compute, the median of ``reps``. ``queued``:
        behind a GPU-side sleep, so the GPU's own time (latency included) is timed, not the
        host's launch path (what the truth uses; the host-launched figure is kept beside)."""
        if self.dist is None:
            return 0.0
        with aside(self.dist):
            return self._pure_comm(queued, reps, batch)

    def _pure_comm(self, queued: bool, reps: int, batch: int) -> float:
        flag = self.timed(lambda: self.dist.all_reduce(self.flag, op=self.dist.ReduceOp.MAX),
                          reps, batch, queued)
        if self.args.coll == "none":
            return float(flag)
        return float(max(self.args.rounds, 1) * self.timed(self.collective, reps, batch, queued)
                     + flag)

    def timed(self, op: Any, reps: int, batch: int, queued: bool) -> float:
        torch, times = self.torch, []
        for _ in range(reps):
            self.dist.barrier()
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            if queued:
                queue_ahead(torch)
            start.record()
            for _ in range(batch):
                op()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000.0 / batch)
        one = sorted(times)[len(times) // 2]
        shared = torch.tensor([one], device=self.full.device)
        self.dist.all_reduce(shared, op=self.dist.ReduceOp.MAX)  # one figure for the job
        return float(shared.item())


def write_for(host: Any, seconds: float, path: str) -> None:
    """Spend ``seconds`` on the host writing ``host`` (a pinned uint8 tensor) to ``path`` in
    64 MiB chunks, as a checkpoint writer does; sleep what is left if the file is done."""
    if seconds <= 0:
        return
    end = time.monotonic() + seconds
    view = memoryview(host.numpy())
    chunk = 64 * 2**20
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        offset = 0
        while time.monotonic() < end and offset < len(view):
            offset += os.pwrite(fd, view[offset:offset + chunk], offset)
    finally:
        os.close(fd)
    time.sleep(max(end - time.monotonic(), 0.0))


def _rank_main(rank: int, world: int, port: int, args: argparse.Namespace, kind: str,
               stop_event: Any, seconds: float) -> None:
    torch, plain, dev, local_stop = join_ranks(rank, world, port)
    dist = CountedDist(plain)  # every collective counted where it is launched
    job = Job(torch, dist, rank, world, args, dev)
    timer = SplitTimer(torch, rank, args.truth_every)
    timer.work = job.work
    timer.dist = dist
    for _ in range(3):  # warm-up: NCCL channels, cuBLAS heuristics
        job.step(timer)
    job.end_of_step(timer, False)
    timer.pure = job.pure_comm()
    timer.info["pure_host_per_step_s"] = job.pure_comm(queued=False)
    timer.reset()
    deadline = time.monotonic() + seconds
    if job.ckpt is not None:
        job.last_ckpt = time.monotonic() - args.ckpt_every_s / 2  # the first one mid-way
    if rank == 0:
        emit("ready", info={"world": world, "kind": kind, **_knobs(args),
                            "devices": [device_info(torch, i) for i in range(world)]})
    timer.emit()
    while True:
        job.step(timer)
        timer.step_done()
        want = local_stop.is_set() or stop_event.is_set() or time.monotonic() >= deadline
        if job.end_of_step(timer, want):
            break
    timer.emit()
    dist.destroy_process_group()


def _knobs(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k) for k in (
        "dtype", "gemm_n", "gemms", "rounds", "coll", "coll_kib", "heavy", "heavy_rank", "extra",
        "jitter_ms", "h2d_mib", "mem_mib", "ckpt_every_s", "ckpt_mib", "ckpt_host_s")}


def split_job(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    world = min(torch.cuda.device_count(), args.world or torch.cuda.device_count())
    spawn_ranks(stop, _rank_main, max(world, 2), args, "split_job")
    return {"kind": "split_job", "world": world}


def _child_main(rank: int, world: int, port: int, args: argparse.Namespace, kind: str,
                stop_event: Any, seconds: float) -> None:
    """A one-GPU workload's body in a child of the workload's session leader."""
    import signal

    stop = Stop(seconds, stop_event)
    signal.signal(signal.SIGTERM, lambda *_: stop_event.set())
    signal.signal(signal.SIGINT, lambda *_: stop_event.set())
    (_solo_body if kind == "split_solo" else _bursty_body)(stop, args)


def in_child(kind: str) -> Runner:
    """A one-GPU workload run in a spawned child, as the ranks of ``split_job`` are: the
    process holding the GPU is then a member of the workload's own process session, not a
    session leader, so process-session identities (``--no-job-environ``) make each load a
    job of its own. (A session leader under a parent that leads no session is taken as one
    of torchrun's workers and joins its parent's session: one-GPU loads started side by side
    by this bench were one job.)"""

    def run(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
        spawn_ranks(stop, _child_main, 1, args, kind)
        return {"kind": kind, "in_child": True}

    return run


def _solo_body(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    """One GPU, no peer: the same steps without a collective (a kernel size's own hollowness,
    a checkpoint or a loader delay with nobody to wait for)."""
    torch = load_torch(device=0)
    job = Job(torch, None, 0, 1, args, torch.device("cuda", 0))
    timer = SplitTimer(torch, 0, args.truth_every)
    timer.work = job.work
    for _ in range(3):
        job.step(timer)
    timer.pure = 0.0
    timer.reset()
    if job.ckpt is not None:
        job.last_ckpt = time.monotonic() - args.ckpt_every_s / 2
    emit("ready", info={"world": 1, "kind": "split_solo", **_knobs(args),
                        "devices": [device_info(torch, 0)]})
    timer.emit()
    while True:
        job.step(timer)
        timer.step_done()
        if job.end_of_step(timer, stop()):
            break
    timer.emit()
    return {"kind": "split_solo", "steps": job.steps}


def _bursty_body(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    """One GPU: bursts of bf16 GEMMs (--burst-min..--burst-max seconds) between host stalls
    (--stall-min..--stall-max seconds, no kernel). Each burst's span on the GPU is emitted in
    wall-clock time (``burst`` events: the GPU is idle when a burst is queued, so its first
    event runs as the host records it), for per-window kernel-time truth."""
    torch = load_torch(device=0)
    rng = random.Random(args.seed)
    n = args.gemm_n
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    for _ in range(5):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20):
        torch.matmul(a, b, out=c)
    e1.record()
    e1.synchronize()
    gemm_s = e0.elapsed_time(e1) / 1000.0 / 20
    emit("ready", info={"world": 1, "kind": "split_bursty", "gemm_s": gemm_s,
                        "devices": [device_info(torch, 0)]})
    t0, busy, bursts = time.time(), 0.0, 0
    last = t0
    while not stop():
        burst = rng.uniform(args.burst_min, args.burst_max)
        count = max(1, round(burst / gemm_s))
        s0 = torch.cuda.Event(enable_timing=True)
        s1 = torch.cuda.Event(enable_timing=True)
        start = time.time()
        s0.record()
        for _ in range(count):
            torch.matmul(a, b, out=c)
        s1.record()
        s1.synchronize()
        span = s0.elapsed_time(s1) / 1000.0
        busy += span
        bursts += 1
        emit("burst", start=start, end=start + span)
        if time.time() - last >= args.truth_every:
            last = time.time()
            emit("truth", rank=0, wall_s=last - t0, steps=bursts, compute_s=busy)
        stop.wait(rng.uniform(args.stall_min, args.stall_max))
    emit("truth", rank=0, wall_s=time.time() - t0, steps=bursts, compute_s=busy)
    return {"kind": "split_bursty", "bursts": bursts, "busy_s": busy}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", choices=DTYPES, default="bf16", help="GEMM precision")
    p.add_argument("--gemm-n", type=int, default=8192, help="square GEMM size")
    p.add_argument("--gemms", type=int, default=8, help="work units (GEMMs) per round")
    p.add_argument("--rounds", type=int, default=1, help="(work, collective) rounds per step")
    p.add_argument("--coll", choices=COLLECTIVES, default="all_reduce",
                   help="collective after each round's work")
    p.add_argument("--coll-kib", type=int, default=131072,
                   help="collective size (the full tensor), KiB")
    p.add_argument("--heavy", choices=("none", "static", "rotating"), default="none",
                   help="which rank runs (1 + --extra) times the work")
    p.add_argument("--heavy-rank", type=int, default=-1, help="the static heavy rank (-1: last)")
    p.add_argument("--extra", type=float, default=0.0, help="the heavy rank's extra work")
    p.add_argument("--jitter-ms", type=float, default=0.0,
                   help="a random host delay of 0..this before each step, every rank")
    p.add_argument("--h2d-mib", type=int, default=0, help="a batch copied in each step, MiB")
    p.add_argument("--mem-mib", type=int, default=0,
                   help="memory-bound work: each unit rewrites a buffer of this size")
    p.add_argument("--ckpt-every-s", type=float, default=0.0, help="checkpoint period")
    p.add_argument("--ckpt-mib", type=int, default=1024, help="checkpoint state, MiB")
    p.add_argument("--ckpt-host-s", type=float, default=1.0,
                   help="seconds on the host writing each checkpoint")
    p.add_argument("--burst-min", type=float, default=0.2, help="split_bursty")
    p.add_argument("--burst-max", type=float, default=1.0, help="split_bursty")
    p.add_argument("--stall-min", type=float, default=0.2, help="split_bursty")
    p.add_argument("--stall-max", type=float, default=1.0, help="split_bursty")
    p.add_argument("--seed", type=int, default=46)
    p.add_argument("--world", type=int, default=0, help="ranks (0: every visible GPU)")
    p.add_argument("--truth-every", type=float, default=2.0, help="seconds between truths")


FAMILY = Family(
    name="split",
    summary="the [split] run (bench/gpu/split.py): jobs that time every part of their split",
    add_arguments=add_arguments,
    runners={"split_job": split_job, "split_solo": in_child("split_solo"),
             "split_bursty": in_child("split_bursty")},
    dry_run=idle_dry_run,
    descriptions={
        "split_job": "ranks x (host delay, H2D batch, rounds x (work, collective), checkpoint)",
        "split_solo": "split_job's steps on one GPU, no collective",
        "split_bursty": "one GPU: GEMM bursts between host stalls, each burst's span emitted",
    },
)
