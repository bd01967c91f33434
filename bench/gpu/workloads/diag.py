"""Workloads of the [diagnosis] run (``bench/gpu/diagnosis.py``): transfers, a host-sync loop,
collectives, stand-ins for a waiting rank, and serving bursts. One per process::

    python3 -m bench.gpu.workloads h2d --seconds 30

``done`` carries the stats each workload returns; ``--dry-run`` is the plain one (ready,
sleep, done). The all-reduce rows spawn one NCCL rank per GPU; NVLink multicast stays off
(the entry point sets ``core.NO_MULTICAST`` before torch loads, and each rank again).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from typing import Any

from bench.gpu.workloads.core import (
    Family,
    Stop,
    bf16_square,
    command,
    device_info,
    emit,
    host_work,
    idle_dry_run,
    join_ranks,
    load_torch,
    per_second,
    spawn_ranks,
)

# name -> (GPUs it needs, what an expert calls it, description)
WORKLOADS: dict[str, tuple[int, str, str]] = {
    "h2d": (1, "transfer_bound (PCIe host->device)",
            "pinned host -> device copies of 256 MiB, back to back"),
    "d2h": (1, "transfer_bound (PCIe device->host)",
            "device -> pinned host copies of 256 MiB, back to back"),
    "sync_loop": (1, "host_bound (sync per step)",
                  "training-like loop: small bf16 matmuls, loss.item() every step, ~1 ms of "
                  "host work"),
    "allreduce_straggler": (2, "rank 0: comm_wait on GPU 1; rank 1: compute_bound straggler",
                            "NCCL all-reduce of 256 MiB per step, 2 GPUs; rank 1 does 3x the "
                            "bf16 matmuls of rank 0"),
    "allreduce_balanced": (2, "compute_bound on both, no flags, no straggler",
                           "NCCL all-reduce of 256 MiB per step, 2 GPUs, equal compute"),
    "standin_wait": (1, "comm_wait (stand-in)",
                     "STAND-IN for a rank waiting in a collective (one GPU): a spin kernel on "
                     "16 blocks x 512 threads, relaunched back to back, as NCCL's kernels spin "
                     "while a peer is late"),
    "standin_waiting_rank": (1, "comm_wait (stand-in)",
                             "STAND-IN for the waiting rank of a straggler job (one GPU): each "
                             "step 1 unit of bf16 matmuls, then 2 units of spin kernel"),
    "standin_pair": (1, "mixed: compute + waiting kernel on one GPU (stand-in)",
                     "STAND-IN for two ranks (one GPU): two processes share GPU 0, one doing "
                     "bf16 matmuls, the other the spin kernel"),
    "serving": (1, "serving burst from its first window",
                "llama-server /completion, streamed: a 3 s burst of 1 stream, 3 s and 8 s bursts "
                "of N concurrent streams, idle gaps between; client-side token counts"),
}


# --- transfers ------------------------------------------------------------------------------

def _copy_loop(stop: Stop, args: argparse.Namespace, to_device: bool) -> dict[str, Any]:
    torch = load_torch()
    nbytes = args.chunk_mib * 2**20
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst, src = (dev, host) if to_device else (host, dev)
    for _ in range(2):  # warm-up
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    emit("ready", info={**device_info(torch, 0), "chunk_bytes": nbytes,
                        "direction": "h2d" if to_device else "d2h"})
    t0, copies = time.monotonic(), 0
    while not stop():
        for _ in range(4):  # queue a few so the copy engine never waits on Python
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        copies += 4
    wall = time.monotonic() - t0
    return {"copies": copies, "bytes": copies * nbytes, "seconds": wall,
            "bytes_per_second": per_second(copies * nbytes, wall)}


def h2d(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    return _copy_loop(stop, args, to_device=True)


def d2h(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    return _copy_loop(stop, args, to_device=False)


# --- host-sync loop -------------------------------------------------------------------------

def sync_loop(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    torch = load_torch()
    n = args.sync_n
    a = bf16_square(torch, n)
    w = bf16_square(torch, n)
    for _ in range(3):
        (a @ w).float().mean().item()
    emit("ready", info={**device_info(torch, 0), "n": n, "matmuls_per_step": args.sync_matmuls,
                        "host_ms": args.host_ms})
    t0, steps = time.monotonic(), 0
    while not stop():
        x = a
        for _ in range(args.sync_matmuls):
            x = torch.tanh(x @ w)
        loss = x.float().mean().item()  # the device -> host sync of every step
        host_work(args.host_ms / 1000.0)  # data loading, logging, optimizer bookkeeping
        steps += 1
    wall = time.monotonic() - t0
    return {"steps": steps, "seconds": wall, "steps_per_second": per_second(steps, wall),
            "last_loss": loss if steps else None}


# --- spin kernel (stand-in for a rank waiting in a collective) ------------------------------

SPIN_SRC = r"""
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""


class Spinner:
    """Launches a kernel that spins ``ms`` milliseconds of wall time (the GPU's global timer)
    on ``blocks`` x ``threads`` (CuPy); falls back to ``torch.cuda._sleep`` (one block, SM
    cycles at an assumed 1.5 GHz) without CuPy."""

    def __init__(self, blocks: int, threads: int) -> None:
        self.blocks, self.threads = blocks, threads
        self.cupy: Any = None
        try:
            import cupy

            kernel = cupy.RawKernel(SPIN_SRC, "spin")
            kernel((1,), (1,), (cupy.uint64(1000),))
            cupy.cuda.Device(0).synchronize()
            self.cupy, self.kernel = cupy, kernel
            self.kind = f"cupy spin kernel, {blocks} blocks x {threads} threads"
        except Exception as exc:
            self.kind = f"torch.cuda._sleep (one block; CuPy unavailable: {exc})"

    def spin(self, ms: float) -> None:
        if self.cupy is not None:
            self.kernel((self.blocks,), (self.threads,), (self.cupy.uint64(int(ms * 1e6)),))
        else:
            import torch

            torch.cuda._sleep(int(ms * 1_500_000))

    def sync(self) -> None:
        if self.cupy is not None:
            self.cupy.cuda.Device(0).synchronize()
        else:
            import torch

            torch.cuda.synchronize()


def standin_wait(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    spinner = Spinner(args.spin_blocks, args.spin_threads)
    spinner.spin(1.0)
    spinner.sync()
    emit("ready", info={"stand_in": True, "spinner": spinner.kind, "gpu_index": 0})
    t0, launches = time.monotonic(), 0
    while not stop():
        for _ in range(10):
            spinner.spin(1.0)
        spinner.sync()
        launches += 10
    return {"spin_launches": launches, "seconds": time.monotonic() - t0, "spinner": spinner.kind}


def standin_waiting_rank(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    torch = load_torch()
    n = args.gemm_n
    a = bf16_square(torch, n)
    b = bf16_square(torch, n)
    torch.cuda.synchronize()
    t = time.monotonic()
    for _ in range(args.gemms):
        a @ b
    torch.cuda.synchronize()
    unit_ms = (time.monotonic() - t) * 1000.0  # one unit of compute, measured
    spinner = Spinner(args.spin_blocks, args.spin_threads)
    spinner.spin(1.0)
    spinner.sync()
    emit("ready", info={**device_info(torch, 0), "stand_in": True, "spinner": spinner.kind,
                        "unit_ms": unit_ms, "wait_units": 2})
    t0, steps = time.monotonic(), 0
    while not stop():
        for _ in range(args.gemms):
            a @ b
        torch.cuda.synchronize()
        spinner.spin(2 * unit_ms)  # waiting for a peer that computes 3 units
        spinner.sync()
        steps += 1
    return {"steps": steps, "seconds": time.monotonic() - t0, "unit_ms": unit_ms}


def gemm(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    """Plain bf16 matmuls back to back (the compute half of standin_pair)."""
    torch = load_torch()
    n = args.gemm_n
    a = bf16_square(torch, n)
    b = bf16_square(torch, n)
    a @ b
    torch.cuda.synchronize()
    emit("ready", info={**device_info(torch, 0), "n": n})
    t0, count = time.monotonic(), 0
    while not stop():
        for _ in range(args.gemms):
            a @ b
        torch.cuda.synchronize()
        count += args.gemms
    wall = time.monotonic() - t0
    return {"gemms": count, "seconds": wall, "tflops": per_second(2 * n**3 * count, wall) / 1e12}


def standin_pair(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    """Two child processes on GPU 0: ``gemm`` and ``standin_wait``."""
    opts = ["--seconds", str(max(1.0, stop.deadline - time.monotonic())),
            "--gemm-n", str(args.gemm_n), "--gemms", str(args.gemms),
            "--spin-blocks", str(args.spin_blocks), "--spin-threads", str(args.spin_threads)]
    children = {name: subprocess.Popen(command(name, *opts), stdout=subprocess.PIPE,
                                       text=True, env=dict(os.environ))
                for name in ("gemm", "standin_wait")}
    events: dict[str, dict[str, Any]] = {}
    try:
        for name, child in children.items():  # each child's ready (or error) first
            assert child.stdout is not None
            for line in child.stdout:
                rec = json.loads(line) if line.startswith("{") else {}
                if rec.get("event") in ("ready", "error"):
                    events[name] = rec
                    break
            if events.get(name, {}).get("event") != "ready":
                raise RuntimeError(f"{name}: {events.get(name, {}).get('error', 'no ready')}")
        emit("ready", info={"stand_in": True,
                            "children": {k: v.get("info") for k, v in events.items()}})
        while not stop() and all(c.poll() is None for c in children.values()):
            time.sleep(0.2)
    finally:
        stats: dict[str, Any] = {}
        for name, child in children.items():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
            out, _ = child.communicate(timeout=30)
            for line in out.splitlines():
                if line.startswith("{") and '"done"' in line:
                    stats[name] = json.loads(line).get("stats")
            stats[f"{name}_exit"] = child.returncode
    return stats


# --- NCCL all-reduce on 2 GPUs --------------------------------------------------------------

def _allreduce_rank(rank: int, world: int, port: int, args: argparse.Namespace,
                    compute_units: list[int], stop_event: Any, seconds: float) -> None:
    torch, dist, dev, local_stop = join_ranks(rank, world, port)
    n = args.gemm_n
    a = bf16_square(torch, n, dev)
    b = bf16_square(torch, n, dev)
    buf = torch.ones(args.allreduce_mib * 2**20 // 4, device=dev, dtype=torch.float32)
    flag = torch.zeros(1, device=dev, dtype=torch.float32)
    units = compute_units[rank]

    def step() -> bool:
        for _ in range(units * args.gemms):
            a @ b
        dist.all_reduce(buf)
        buf.mul_(1.0 / world)  # keep the values bounded
        want = local_stop.is_set() or stop_event.is_set() or time.monotonic() >= deadline
        flag.fill_(1.0 if want else 0.0)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank stops at the same step
        return bool(flag.item() > 0)

    deadline = time.monotonic() + seconds + 120  # warm-up below
    step()
    dist.barrier()
    deadline = time.monotonic() + seconds
    if rank == 0:
        emit("ready", info={"world": world, "compute_units": compute_units,
                            "gemm_n": n, "gemms_per_unit": args.gemms,
                            "allreduce_bytes": buf.numel() * 4,
                            "straggler_rank": (compute_units.index(max(compute_units))
                                               if len(set(compute_units)) > 1 else None),
                            "devices": [device_info(torch, i) for i in range(world)]})
    t0, steps = time.monotonic(), 0
    while True:
        steps += 1
        if step():
            break
    wall = time.monotonic() - t0
    emit("rank_stats", rank=rank, steps=steps, seconds=wall,
         steps_per_second=per_second(steps, wall), compute_units=units)
    dist.destroy_process_group()


def _allreduce(stop: Stop, args: argparse.Namespace, units: list[int]) -> dict[str, Any]:
    spawn_ranks(stop, _allreduce_rank, 2, args, units)
    return {"compute_units": units}


def allreduce_straggler(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    return _allreduce(stop, args, [args.units, 3 * args.units])


def allreduce_balanced(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    return _allreduce(stop, args, [args.units, args.units])


# --- serving burst --------------------------------------------------------------------------

def _stream_until(url: str, end: float, n_predict: int, tokens: dict[int, int],
                  lock: threading.Lock, prompt: str) -> int:
    """Stream one /completion after another until ``end`` (time.time()); counts tokens per
    wall-clock second in ``tokens``. Closing the connection makes llama-server stop the task."""
    total = 0
    while time.time() < end:
        body = json.dumps({"prompt": prompt, "n_predict": n_predict, "stream": True,
                           "cache_prompt": False}).encode()
        req = urllib.request.Request(url.rstrip("/") + "/completion", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                while time.time() < end:
                    line = resp.readline()
                    if not line:
                        break
                    if not line.startswith(b"data: "):
                        continue
                    try:
                        chunk = json.loads(line[6:])
                    except ValueError:
                        continue
                    if chunk.get("stop"):
                        break
                    sec = int(time.time())
                    with lock:
                        tokens[sec] = tokens.get(sec, 0) + 1
                    total += 1
        except OSError:
            time.sleep(0.2)
    return total


def parse_bursts(text: str, streams: int) -> list[tuple[float, int]]:
    """``"3:1,3,8"`` -> [(3.0, 1), (3.0, streams), (8.0, streams)]: seconds[:streams]."""
    out = []
    for part in text.split(","):
        if part.strip():
            seconds, _, n = part.partition(":")
            out.append((float(seconds), int(n) if n else streams))
    return out


def serving(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    if not args.url:
        raise RuntimeError("no --url for llama-server")
    with urllib.request.urlopen(args.url.rstrip("/") + "/health", timeout=5) as resp:
        health = resp.read().decode(errors="replace")[:200]
    bursts = parse_bursts(args.bursts, args.streams)
    plan = args.gap + sum(b + args.gap for b, _ in bursts)
    emit("ready", info={"url": args.url, "health": health,
                        "bursts": [{"seconds": b, "streams": n} for b, n in bursts],
                        "gap_seconds": args.gap,
                        "duration": plan, "n_predict": args.n_predict})
    tokens: dict[int, int] = {}
    lock = threading.Lock()
    done_bursts = []
    prompt = "Write a long story about a lighthouse keeper and the sea. " * 4
    for burst, streams in bursts:
        if stop.event.wait(args.gap):
            break
        start = time.time()
        end = start + burst
        results: list[int] = []

        def client(end: float = end, results: list[int] = results) -> None:
            results.append(_stream_until(args.url, end, args.n_predict, tokens, lock, prompt))

        threads = [threading.Thread(target=client) for _ in range(streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(burst + 40)
        done_bursts.append({"start": start, "end": end, "streams": streams,
                            "tokens": sum(results), "tokens_per_second": sum(results) / burst})
    stop.event.wait(args.gap)
    return {"bursts": done_bursts, "tokens_per_wall_second": {str(k): v for k, v in
                                                              sorted(tokens.items())}}


# --- the family ---------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chunk-mib", type=int, default=256, help="copy size (h2d, d2h)")
    p.add_argument("--sync-n", type=int, default=1024, help="matrix size (sync_loop)")
    p.add_argument("--sync-matmuls", type=int, default=4, help="matmuls per step (sync_loop)")
    p.add_argument("--host-ms", type=float, default=1.0, help="host work per step (sync_loop)")
    p.add_argument("--gemm-n", type=int, default=8192, help="matrix size (gemm, all-reduce)")
    p.add_argument("--gemms", type=int, default=4, help="matmuls per compute unit")
    p.add_argument("--units", type=int, default=1,
                   help="compute units per step of the all-reduce's fast rank")
    p.add_argument("--allreduce-mib", type=int, default=256, help="all-reduce size per step")
    p.add_argument("--spin-blocks", type=int, default=16)
    p.add_argument("--spin-threads", type=int, default=512)
    p.add_argument("--url", default="", help="llama-server base URL (serving)")
    p.add_argument("--streams", type=int, default=8, help="concurrent streams (serving)")
    p.add_argument("--bursts", default="3:1,3,8",
                   help="bursts as SECONDS[:STREAMS],... (serving; STREAMS defaults to --streams)")
    p.add_argument("--gap", type=float, default=6.0, help="idle seconds around bursts (serving)")
    p.add_argument("--n-predict", type=int, default=1024, help="tokens per request (serving)")


FAMILY = Family(
    name="diag",
    summary="the [diagnosis] run (diagnosis.py; gemm is the footprint run's load too)",
    add_arguments=add_arguments,
    runners={
        "h2d": h2d, "d2h": d2h, "sync_loop": sync_loop, "gemm": gemm,
        "allreduce_straggler": allreduce_straggler, "allreduce_balanced": allreduce_balanced,
        "standin_wait": standin_wait, "standin_waiting_rank": standin_waiting_rank,
        "standin_pair": standin_pair, "serving": serving,
    },
    dry_run=idle_dry_run,
    descriptions={**{name: row[2] for name, row in WORKLOADS.items()},
                  "gemm": "bf16 matmuls back to back (half of standin_pair; the footprint load)"},
)
