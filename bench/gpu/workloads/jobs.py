"""Workloads of the [jobs] run (``bench/gpu/jobs.py``): multi-GPU jobs whose truth the ranks
measure themselves, so the exporter's straggler and waited share can be checked against it.

Every rank times each step on its own GPU with CUDA events: ``compute`` (its own GEMMs),
``comm`` (its collective or point-to-point calls, waiting included) and, for a rank stalled on
its host, ``stall`` (host time before its GEMMs); the collective workloads also measure each
phase's launch gap (``resident.py``: the GPU reached the phase before the host launched into
it), which the [split] truth counts as host time, and count the NCCL collectives they launch
(``counted.py``). Ranks emit cumulative ``truth`` events every
``--truth-every`` seconds; the orchestrator turns them into each rank's waited share::

    waited(rank) = (comm(rank) - min over ranks of comm) / wall

The rank that arrives last at a collective spends only the transfer in it; every other rank
spends the transfer plus the time it waited for the last one. One process per GPU (NCCL),
``python3 -m bench.gpu.workloads job_straggler --extra 0.1 --seconds 60``; NVLink multicast
stays off (the entry point sets ``core.NO_MULTICAST``; each rank again).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from bench.gpu.workloads.core import (
    Family,
    Stop,
    bf16_square,
    device_info,
    emit,
    idle_dry_run,
    join_ranks,
    spawn_ranks,
)
from bench.gpu.workloads.counted import CountedDist, aside
from bench.gpu.workloads.resident import LaunchGaps, alone_per_unit, queue_ahead

# name -> (GPUs, what an expert calls it, description)
WORKLOADS: dict[str, tuple[int, str, str]] = {
    "job_straggler": (2, "last rank straggler (works more), the others comm_wait",
                      "each step every rank runs --units x --gemms bf16 GEMMs, the last rank "
                      "(1 + --extra) times as many, then one NCCL all-reduce of --allreduce-mib"),
    "job_balanced": (2, "no straggler, nobody waits",
                     "job_straggler with equal work on every rank"),
    "job_host_stall": (2, "last rank host_bound straggler, the others comm_wait",
                       "job_balanced, but the last rank sleeps --stall-ms on its host before "
                       "each step's GEMMs (a slow data loader)"),
    "job_ddp": (2, "no straggler: all-reduce overlapped with compute",
                "DDP-like: GEMMs in --buckets chunks, each chunk's gradient bucket all-reduced "
                "asynchronously while the next chunk computes, equal work"),
    "job_pipeline": (2, "two-stage pipeline: the heavier stage is the straggler",
                     "rank 0 computes stage 1 of each micro-batch and sends its activation "
                     "to rank 1, which computes stage 2 ((1 + --extra) times the work)"),
    "job_rotating": (2, "no straggler, yet every rank waits about a third of its time",
                     "job_balanced, but each step one rank (in turn) runs (1 + --extra) times "
                     "the GEMMs: imbalance that moves (variable sequence lengths, MoE routing)"),
    "job_gpipe": (2, "no straggler: every stage waits alike in the fill and drain bubbles",
                  "one stage per rank, GPipe schedule: --microbatches forward through the "
                  "stages (send/recv of an activation), then backward in reverse"),
    "job_tp": (2, "no straggler: balanced, mostly transfer (tensor-parallel-like)",
               "--rounds x (--gemms GEMMs of --gemm-n, then an --allreduce-mib all-reduce) "
               "per step, equal work on every rank"),
    "job_late": (2, "the last rank joins --late-s late; then balanced, no straggler",
                 "job_balanced, but the last rank sleeps --late-s on its host before its "
                 "first step (a slow loader or checkpoint read): its peers wait in the "
                 "first all-reduce"),
    "job_p2p": (2, "transfer_bound on both GPUs (NVLink), no straggler",
                "one process copies a --chunk-mib buffer from GPU 0 to GPU 1 back to back "
                "(peer-to-peer over NVLink, no kernels of its own on GPU 1)"),
}


class Timer:
    """Cumulative per-rank GPU time per phase, from CUDA events read after each step."""

    def __init__(self, torch: Any, rank: int, every: float) -> None:
        self.torch, self.rank, self.every = torch, rank, every
        self.pure: float | None = None
        self.info: dict[str, Any] = {}
        """Carried on every truth line (the resident ratios, the transfer timed two ways)."""
        self.work: Callable[[int], None] | None = None
        """Launches n units of the rank's compute; set, the kernels' own time of each unit
        is timed alone (queued ahead) at the start and at every truth line, and the
        ``kernel_alone`` total (units run x that time) caps the compute time in the truth."""
        self.unit_alone = 0.0
        self.dist: CountedDist | None = None
        """Set, every truth line carries its collectives launched so far (``collectives``:
        all, as NCCL counts them; ``step_collectives``: the steps' own) and ``clock_s``, the
        seconds since the origin with no pause taken out (NCCL counts per real second)."""
        self.reset()

    def reset(self) -> None:
        """Start counting now (after the warm-up steps)."""
        self.totals = {"compute": 0.0, "comm": 0.0, "stall": 0.0}
        self.steps = 0
        self.paused = 0.0
        if self.work is not None:
            self.totals["kernel_alone"] = 0.0
            self.calibrate()
        self.paused = 0.0
        self.t0 = time.monotonic()
        self.last = self.t0

    def calibrate(self) -> None:
        """Time one unit of compute alone (about a millisecond of it, queued ahead); the
        seconds this takes are not the rank's wall time (the stream is idle between steps)."""
        if self.work is None:
            return
        t = time.monotonic()
        with aside(self.dist):
            guess = self.unit_alone or alone_per_unit(self.torch, self.work, 1, reps=1)
            count = max(1, min(64, round(0.001 / max(guess, 1e-6))))
            self.unit_alone = alone_per_unit(self.torch, self.work, count)
        self.paused += time.monotonic() - t

    def units(self, count: int) -> None:
        """``count`` units of compute were launched in this step."""
        if "kernel_alone" in self.totals:
            self.totals["kernel_alone"] += count * self.unit_alone

    def event(self) -> Any:
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def add(self, phase: str, start: Any, end: Any) -> None:
        self.totals[phase] += start.elapsed_time(end) / 1000.0

    def step_done(self) -> None:
        self.steps += 1
        now = time.monotonic()
        if now - self.last >= self.every:
            self.emit()
            self.calibrate()  # the clocks drift as the GPU warms: the next interval's figure
            self.last = time.monotonic()

    def emit(self, **extra: Any) -> None:
        """One cumulative truth line; each carries the transfer alone per step, so a rank
        whose last line is lost when its launcher stops it still has it."""
        now = time.monotonic()
        counts = ({"collectives": self.dist.total, "step_collectives": self.dist.steps,
                   "clock_s": now - self.t0} if self.dist is not None else {})
        emit("truth", rank=self.rank, wall_s=now - self.t0 - self.paused,
             steps=self.steps, unit_alone_s=self.unit_alone, **counts,
             **{f"{k}_s": round(v, 6) for k, v in self.totals.items()},
             **({"pure_comm_per_step_s": self.pure} if self.pure is not None else {}),
             **self.info, **extra)


def _rank_main(rank: int, world: int, port: int, args: argparse.Namespace, kind: str,
               stop_event: Any, seconds: float) -> None:
    torch, plain, dev, local_stop = join_ranks(rank, world, port)
    dist = CountedDist(plain)  # every collective counted where it is launched
    a, b = bf16_square(torch, args.gemm_n, dev), bf16_square(torch, args.gemm_n, dev)
    flag = torch.zeros(1, device=dev, dtype=torch.float32)
    timer = Timer(torch, rank, args.truth_every)
    timer.dist = dist
    step = STEPS[kind](torch, dist, rank, world, args, a, b, timer)
    flag_gaps = LaunchGaps(timer)
    deadline = time.monotonic() + seconds + 120

    def want_stop() -> bool:
        return finish(local_stop.is_set() or stop_event.is_set() or time.monotonic() >= deadline)

    def finish(want: bool) -> bool:
        """Every rank stops at the same step; the flag's all-reduce is a collective like
        any other (a rank that finished early waits in it), so its time counts as comm."""
        flag.fill_(1.0 if want else 0.0)
        e0 = flag_gaps.start()
        flag_gaps.launch("comm", e0, lambda: dist.all_reduce(flag, op=dist.ReduceOp.MAX))
        e1 = timer.event()
        stop = bool(flag.item() > 0)
        timer.add("comm", e0, e1)
        flag_gaps.settle()
        return stop

    for _ in range(3):  # warm-up: NCCL channels, cuBLAS heuristics
        step()
    want_stop()
    with dist.aside():
        pure = pure_comm(torch, dist, rank, world, kind, args, a.device)
        timer.pure = pure + flag_comm(torch, dist, flag)
    timer.reset()
    deadline = time.monotonic() + seconds
    if rank == 0:
        emit("ready", info={"world": world, "kind": kind, "extra": args.extra,
                            "stall_ms": args.stall_ms, "gemm_n": args.gemm_n,
                            "gemms_per_unit": args.gemms, "units": args.units,
                            "allreduce_mib": args.allreduce_mib, "rounds": args.rounds,
                            "microbatches": args.microbatches, "late_s": args.late_s,
                            "launcher": "torchrun" if _torchrun() else "spawn",
                            "straggler_rank": straggler_rank(kind, args, world),
                            "devices": [device_info(torch, i) for i in range(world)]})
    timer.emit()  # the origin: a late rank's first seconds count from here
    if kind == "job_late" and rank == world - 1 and args.late_s > 0:
        t = time.monotonic()
        time.sleep(args.late_s)  # host time before the first step: its peers wait on it
        timer.totals["stall"] += time.monotonic() - t
    while True:
        step()
        timer.step_done()
        if want_stop():
            break
    timer.emit()
    dist.destroy_process_group()


def pure_comm(torch: Any, dist: Any, rank: int, world: int, kind: str,
              args: argparse.Namespace, device: Any, reps: int = 5, batch: int = 20) -> float:
    """Seconds one step's communication takes when no rank is late: after a barrier, with no
    compute, ``batch`` operations back to back, queued behind a GPU-side sleep so the GPU's
    own time is timed (issue 46: launched one by one from the host, a small collective timed
    the host's launch path, ~48 us on H200, several times the GPU's), the median of ``reps``.
    What the truth subtracts from a rank's comm time to get its waiting."""
    if kind in ("job_pipeline", "job_gpipe"):
        act = torch.ones(args.activation_mib * 2**20 // 2, device=device, dtype=torch.bfloat16)
        # one activation between ranks 0 and 1, timed on both (send on 0, recv on 1); every
        # rank's step has as many such transfers as it has sends and receives
        op = ((lambda: dist.send(act, 1)) if rank == 0 else
              (lambda: dist.recv(act, 0)) if rank == 1 else (lambda: None))
        per_step = p2p_ops(kind, rank, world, args.microbatches)
    else:
        buf = torch.ones(args.allreduce_mib * 2**20 // 4, device=device, dtype=torch.float32)
        op, per_step = (lambda: dist.all_reduce(buf)), max(args.rounds, 1)
    times = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        queue_ahead(torch)  # the GPU's own time, not the host's launch rate
        start.record()
        for _ in range(batch):
            op()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0 / batch)
    one = sorted(times)[len(times) // 2]
    if kind in ("job_pipeline", "job_gpipe"):  # ranks past 1 timed nothing: use rank 1's
        shared = torch.tensor([one], device=device)
        dist.broadcast(shared, 1 if world > 1 else 0)
        one = float(shared.item())
    return float(one * per_step)


def flag_comm(torch: Any, dist: Any, flag: Any, reps: int = 5, batch: int = 20) -> float:
    """Seconds the per-step stop flag's all-reduce takes with no rank late (a step's
    transfer includes it: every rank pays its latency even when nobody waits)."""
    times = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        queue_ahead(torch)
        start.record()
        for _ in range(batch):
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0 / batch)
    return float(sorted(times)[len(times) // 2])


def p2p_ops(kind: str, rank: int, world: int, microbatches: int) -> int:
    """Sends plus receives of one rank in one step."""
    if kind == "job_pipeline":
        return microbatches
    neighbours = (rank > 0) + (rank < world - 1)
    return 2 * microbatches * neighbours  # forward and backward, each neighbour once


def straggler_rank(kind: str, args: argparse.Namespace, world: int) -> int | None:
    """The rank the workload makes slow (None: balanced by construction)."""
    if kind in ("job_straggler", "job_pipeline") and args.extra > 0:
        return world - 1
    if kind == "job_host_stall" and args.stall_ms > 0:
        return world - 1
    return None


Step = Callable[[], None]


def _gemms(a: Any, b: Any, count: int) -> None:
    for _ in range(count):
        a @ b


def _collective_step(torch: Any, dist: Any, rank: int, world: int, args: argparse.Namespace,
                     a: Any, b: Any, timer: Timer, extra: float, stall: float,
                     rotate: bool = False) -> Step:
    """GEMMs then one all-reduce a step; the heavy rank runs (1 + extra) times the GEMMs:
    always the last rank, or with ``rotate`` each rank in turn, one step each."""
    buf = torch.ones(args.allreduce_mib * 2**20 // 4, device=a.device, dtype=torch.float32)
    last = rank == world - 1
    light = args.units * args.gemms
    heavy = round(light * (1.0 + extra))
    steps = [0]
    gaps = LaunchGaps(timer)
    timer.work = lambda n: _gemms(a, b, n)

    def step() -> None:
        mine = heavy if (steps[0] % world == rank if rotate else last) else light
        steps[0] += 1
        if last and stall > 0:
            t = time.monotonic()
            time.sleep(stall)
            timer.totals["stall"] += time.monotonic() - t
        e0 = gaps.start()  # the stream is idle: the last step ended with flag.item()
        gaps.launch("compute", e0, lambda: _gemms(a, b, 1))
        _gemms(a, b, mine - 1)
        timer.units(mine)
        e1 = timer.event()
        gaps.launch("comm", e1, lambda: dist.all_reduce(buf))
        e2 = timer.event()
        buf.mul_(1.0 / world)
        e2.synchronize()
        timer.add("compute", e0, e1)
        timer.add("comm", e1, e2)
        gaps.settle()

    return step


def straggler_step(torch: Any, dist: Any, rank: int, world: int, args: argparse.Namespace,
                   a: Any, b: Any, timer: Timer) -> Step:
    return _collective_step(torch, dist, rank, world, args, a, b, timer, args.extra, 0.0)


def balanced_step(torch: Any, dist: Any, rank: int, world: int, args: argparse.Namespace,
                  a: Any, b: Any, timer: Timer) -> Step:
    return _collective_step(torch, dist, rank, world, args, a, b, timer, 0.0, 0.0)


def host_stall_step(torch: Any, dist: Any, rank: int, world: int, args: argparse.Namespace,
                    a: Any, b: Any, timer: Timer) -> Step:
    return _collective_step(torch, dist, rank, world, args, a, b, timer, 0.0,
                            args.stall_ms / 1000.0)


def ddp_step(torch: Any, dist: Any, rank: int, world: int, args: argparse.Namespace,
             a: Any, b: Any, timer: Timer) -> Step:
    """Gradient buckets all-reduced asynchronously behind the next chunk of compute; only
    the tail (waiting for the last bucket) is counted as comm."""
    n = args.allreduce_mib * 2**20 // 4 // args.buckets
    buckets = [torch.ones(n, device=a.device, dtype=torch.float32) for _ in range(args.buckets)]
    per_bucket = max(1, args.units * args.gemms // args.buckets)

    def step() -> None:
        e0 = timer.event()
        works = []
        for bucket in buckets:
            _gemms(a, b, per_bucket)
            works.append(dist.all_reduce(bucket, async_op=True))
        e1 = timer.event()
        for work in works:
            work.wait()
        e2 = timer.event()
        for bucket in buckets:
            bucket.mul_(1.0 / world)
        e2.synchronize()
        timer.add("compute", e0, e1)
        timer.add("comm", e1, e2)

    return step


def pipeline_step(torch: Any, dist: Any, rank: int, world: int, args: argparse.Namespace,
                  a: Any, b: Any, timer: Timer) -> Step:
    """Two stages, --microbatches per step: rank 0 computes stage 1 of each micro-batch and
    sends its activation, rank 1 receives it and computes stage 2 with (1 + --extra) times
    the GEMMs. Events are read once per step, so the stages overlap as in a real pipeline;
    each rank's comm is its sends or receives (waiting for the peer included)."""
    act = torch.ones(args.activation_mib * 2**20 // 2, device=a.device, dtype=torch.bfloat16)
    light = args.gemms
    heavy = round(args.gemms * (1.0 + args.extra))

    def step() -> None:
        marks = []
        for _ in range(args.microbatches):
            e0 = timer.event()
            if rank == 0:
                _gemms(a, b, light)
                e1 = timer.event()
                dist.send(act, 1)
            else:
                dist.recv(act, 0)
                e1 = timer.event()
                _gemms(a, b, heavy)
            marks.append((e0, e1, timer.event()))
        marks[-1][2].synchronize()
        for e0, e1, e2 in marks:
            timer.add("compute" if rank == 0 else "comm", e0, e1)
            timer.add("comm" if rank == 0 else "compute", e1, e2)

    return step


def rotating_step(torch: Any, dist: Any, rank: int, world: int, args: argparse.Namespace,
                  a: Any, b: Any, timer: Timer) -> Step:
    """Each step one rank, in turn, runs (1 + --extra) times the GEMMs (2x by default): on
    average every rank does the same work, yet each waits for that step's heavy rank."""
    extra = args.extra if args.extra > 0 else 1.0
    return _collective_step(torch, dist, rank, world, args, a, b, timer, extra, 0.0, rotate=True)


def tp_step(torch: Any, dist: Any, rank: int, world: int, args: argparse.Namespace,
            a: Any, b: Any, timer: Timer) -> Step:
    """--rounds x (GEMMs, then a small all-reduce): balanced, communication-heavy."""
    buf = torch.ones(args.allreduce_mib * 2**20 // 4, device=a.device, dtype=torch.float32)
    gaps = LaunchGaps(timer)
    timer.work = lambda n: _gemms(a, b, n)

    def step() -> None:
        marks = []
        e0 = gaps.start()
        for _ in range(max(args.rounds, 1)):
            gaps.launch("compute", e0, lambda: _gemms(a, b, 1))
            _gemms(a, b, args.units * args.gemms - 1)
            timer.units(args.units * args.gemms)
            e1 = timer.event()
            gaps.launch("comm", e1, lambda: dist.all_reduce(buf))
            marks.append((e0, e1, timer.event()))
            e0 = marks[-1][2]
        marks[-1][2].synchronize()
        for e0, e1, e2 in marks:
            timer.add("compute", e0, e1)
            timer.add("comm", e1, e2)
        gaps.settle()

    return step


def gpipe_step(torch: Any, dist: Any, rank: int, world: int, args: argparse.Namespace,
               a: Any, b: Any, timer: Timer) -> Step:
    """One stage per rank: --microbatches forward (receive from the previous stage, compute,
    send to the next), then backward the other way. Each stage idles while the pipeline
    fills and drains: (stages - 1) / (microbatches + stages - 1) of a step in theory."""
    act = torch.ones(args.activation_mib * 2**20 // 2, device=a.device, dtype=torch.bfloat16)
    work = args.units * args.gemms
    first, last = rank == 0, rank == world - 1

    def phase(src: int | None, dst: int | None, marks: list[tuple[str, Any, Any]]) -> None:
        for _ in range(args.microbatches):
            if src is not None:
                e0 = timer.event()
                dist.recv(act, src)
                marks.append(("comm", e0, timer.event()))
            e0 = timer.event()
            _gemms(a, b, work)
            marks.append(("compute", e0, timer.event()))
            if dst is not None:
                e0 = timer.event()
                dist.send(act, dst)
                marks.append(("comm", e0, timer.event()))

    def step() -> None:
        marks: list[tuple[str, Any, Any]] = []
        phase(None if first else rank - 1, None if last else rank + 1, marks)
        phase(None if last else rank + 1, None if first else rank - 1, marks)
        marks[-1][2].synchronize()
        for phase_name, e0, e1 in marks:
            timer.add(phase_name, e0, e1)

    return step


STEPS: dict[str, Callable[..., Step]] = {
    "job_straggler": straggler_step,
    "job_balanced": balanced_step,
    "job_host_stall": host_stall_step,
    "job_ddp": ddp_step,
    "job_pipeline": pipeline_step,
    "job_rotating": rotating_step,
    "job_tp": tp_step,
    "job_gpipe": gpipe_step,
    "job_late": balanced_step,
}


def _torchrun() -> bool:
    """Started by torchrun (or any launcher that sets the torch.distributed variables)."""
    import os

    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def _spawn(kind: str) -> Callable[[Stop, argparse.Namespace], dict[str, Any]]:
    def run(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
        import os

        if _torchrun():  # this process is one rank; the launcher started the others
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            seconds = max(1.0, stop.deadline - time.monotonic())
            _rank_main(rank, world, 0, args, kind, stop.event, seconds)
            return {"kind": kind, "world": world, "rank": rank, "launcher": "torchrun"}
        import torch

        world = min(torch.cuda.device_count(), args.world or torch.cuda.device_count())
        spawn_ranks(stop, _rank_main, max(world, 2), args, kind)
        return {"kind": kind, "world": world}

    return run


def p2p(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    """GPU 0 -> GPU 1 copies in one process (peer access over NVLink where the GPUs have it)."""
    import torch

    if torch.cuda.device_count() < 2:
        raise RuntimeError(f"needs 2 GPUs, torch sees {torch.cuda.device_count()}")
    n = args.chunk_mib * 2**20
    src = torch.empty(n, dtype=torch.uint8, device="cuda:0").fill_(1)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda:1")
    peer = torch.cuda.can_device_access_peer(0, 1)
    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    emit("ready", info={"peer_access": peer, "chunk_bytes": n,
                        "devices": [device_info(torch, i) for i in range(2)]})
    t0, copies, last = time.monotonic(), 0, time.monotonic()
    while not stop():
        for _ in range(8):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        copies += 8
        if time.monotonic() - last >= args.truth_every:
            last = time.monotonic()
            wall = last - t0
            emit("truth", rank=0, wall_s=wall, steps=copies,
                 bytes_per_second=copies * n / wall)
    wall = time.monotonic() - t0
    return {"copies": copies, "seconds": wall, "bytes_per_second": copies * n / wall,
            "peer_access": peer}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gemm-n", type=int, default=8192, help="matrix size")
    p.add_argument("--gemms", type=int, default=8, help="GEMMs per compute unit")
    p.add_argument("--units", type=int, default=1, help="compute units per step")
    p.add_argument("--extra", type=float, default=0.0,
                   help="extra work of the slow rank, as a fraction (0.1 = 10 %% more)")
    p.add_argument("--stall-ms", type=float, default=300.0, help="host stall (job_host_stall)")
    p.add_argument("--allreduce-mib", type=int, default=128, help="all-reduce size per step")
    p.add_argument("--buckets", type=int, default=4, help="gradient buckets (job_ddp)")
    p.add_argument("--microbatches", type=int, default=4, help="micro-batches (job_pipeline)")
    p.add_argument("--activation-mib", type=int, default=64, help="activation (job_pipeline)")
    p.add_argument("--chunk-mib", type=int, default=512, help="copy size (job_p2p)")
    p.add_argument("--rounds", type=int, default=1, help="GEMMs + all-reduce rounds (job_tp)")
    p.add_argument("--late-s", type=float, default=8.0, help="late start (job_late)")
    p.add_argument("--world", type=int, default=0, help="ranks (0: every GPU)")
    p.add_argument("--truth-every", type=float, default=2.0, help="seconds between truths")


FAMILY = Family(
    name="jobs",
    summary="the [jobs] run (bench/gpu/jobs.py): multi-GPU jobs that measure their own truth",
    add_arguments=add_arguments,
    runners={**{name: _spawn(name) for name in STEPS}, "job_p2p": p2p},
    dry_run=idle_dry_run,
    descriptions={name: row[2] for name, row in WORKLOADS.items()},
)
