"""Bus-traffic workloads for the [transfers] validation (issue 26): one process, many phases.

Pinned and pageable copies in both directions from 4 KiB to 1 GiB, copies throttled from
~0.1 GB/s up to link speed, copies overlapped with compute, and managed-memory page
migration (host and device touching the same pages in turn). One process runs every phase
back to back, so a phase costs seconds instead of a torch start-up each::

    python3 -m bench.gpu.workloads transfers --phase-seconds 7 [--phases NAME,NAME] [--dry-run]

Events: ``ready`` once, then per phase ``phase`` (with ``wall``, the ``time.time()`` it
started), ``steady`` (buffers allocated, kernels compiled: the phase's clock starts) and
``phase_done`` (bytes moved, seconds, rate, the phase's own figures), then ``done``.
``bench/gpu/transfers.py`` maps the daemon's 1 s windows onto the phases.

Managed memory is allocated with ``cudaMallocManaged`` (CuPy) at 512 MiB, far below the
card's free memory: asking for more managed memory than the card has free can hang the GPU.
"""

from __future__ import annotations

import argparse
import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.gpu.workloads.core import (
    BadArgs,
    Family,
    Stop,
    bf16_square,
    emit,
    load_torch,
    per_second,
    versions,
)

KIB, MIB, GIB = 1024, 1024**2, 1024**3


@dataclass(frozen=True)
class Phase:
    """One row of the table: what runs, and what an expert calls it."""

    name: str
    kind: str  # hold | notebook | copy | overlap | feed | managed
    expert: str
    pinned: bool = True
    to_device: bool = True
    size: int = 0
    rate: float | None = None  # bytes/s the copies are throttled to; None = as fast as it goes
    note: str = ""


def _copy_phases() -> list[Phase]:
    out = []
    for pinned, tag in ((True, "pinned"), (False, "pageable")):
        for to_device, d in ((True, "h2d"), (False, "d2h")):
            sizes: tuple[tuple[int, str], ...] = (
                (4 * KIB, "4k"), (64 * KIB, "64k"), (1 * MIB, "1m"), (16 * MIB, "16m"),
                (256 * MIB, "256m"), (1 * GIB, "1g"))
            if not to_device:
                sizes = ((4 * KIB, "4k"), (1 * MIB, "1m"), (256 * MIB, "256m"), (1 * GIB, "1g"))
            for size, s in sizes:
                out.append(Phase(f"{tag}_{d}_{s}", "copy", "bus-fed: never idle", pinned,
                                 to_device, size))
    return out


PHASES: tuple[Phase, ...] = (
    Phase("hold_1g", "hold", "allocated_idle", note="1 GiB held, no kernel, no copy"),
    Phase("notebook", "notebook", "allocated_idle",
          note="1 GiB held, one tiny kernel and one 4-byte read every 3 s"),
    *_copy_phases(),
    *(Phase(f"throttled_pinned_h2d_{label}", "copy", "host_bound (the host paces the copies)",
            True, True, size, rate)
      for rate, label, size in ((0.1e9, "0.1gbs", 8 * MIB), (1e9, "1gbs", 64 * MIB),
                                (4e9, "4gbs", 64 * MIB), (16e9, "16gbs", 64 * MIB))),
    Phase("throttled_pinned_d2h_1gbs", "copy", "host_bound", True, False, 64 * MIB, 1e9),
    Phase("throttled_pageable_h2d_1gbs", "copy", "host_bound", False, True, 64 * MIB, 1e9),
    Phase("overlap_pinned_gemm", "overlap", "compute_bound (copies hidden under GEMMs)", True,
          True, 256 * MIB, note="pinned 256 MiB H2D on a side stream + 8192 bf16 GEMMs"),
    Phase("overlap_pageable_gemm", "overlap", "host_bound (the pageable copies starve the GEMMs)",
          False, True, 256 * MIB,
          note="pageable 256 MiB H2D from a second thread + 8192 bf16 GEMMs; on an H100 the "
               "GEMMs barely ran beside the pageable copies (graphics 0.04, SM 0.03)"),
    Phase("feed_pageable_small_step", "feed", "host_bound (input pipeline)", False, True,
          64 * MIB, note="per step: pageable 64 MiB H2D, then 4 bf16 GEMMs of 2048"),
    Phase("managed_pingpong_full", "managed", "bus-fed: never idle", size=512 * MIB,
          note="512 MiB managed: host writes every byte, then a kernel adds 1 to every byte"),
    Phase("managed_pingpong_pages", "managed", "bus-fed: never idle", pinned=False,
          size=512 * MIB,
          note="512 MiB managed: host writes one byte per 4 KiB page, then a kernel reads all"),
)
BY_NAME = {p.name: p for p in PHASES}


class Clock(Stop):
    """A phase's deadline on the run's stop flag. :meth:`start` (called once buffers are
    allocated and kernels compiled) restarts it and tells the orchestrator that the steady
    loop begins."""

    def __init__(self, name: str, seconds: float, stop: threading.Event) -> None:
        super().__init__(seconds, stop)
        self.name = name

    def start(self) -> None:
        self.restart()
        emit("steady", name=self.name, wall=time.time())


def _pace(t0: float, moved: int, rate: float | None, done: Clock) -> None:
    """Sleep until ``moved`` bytes fit ``rate`` since ``t0`` (never past the phase's end)."""
    if rate:
        wait = t0 + moved / rate - time.monotonic()
        if wait > 0:
            done.wait(wait)


def run_copy(torch: Any, p: Phase, done: Clock) -> dict[str, Any]:
    n = p.size
    host = torch.ones(n, dtype=torch.uint8, pin_memory=p.pinned)  # ones: pages are touched
    dev = torch.ones(n, dtype=torch.uint8, device="cuda")
    dst, src = (dev, host) if p.to_device else (host, dev)
    batch = max(1, min(64, (256 * MIB) // n)) if p.rate is None else 1
    dst.copy_(src, non_blocking=p.pinned)
    torch.cuda.synchronize()
    done.start()
    t0, moved, copies = time.monotonic(), 0, 0
    while not done():
        for _ in range(batch):
            dst.copy_(src, non_blocking=p.pinned)
        torch.cuda.synchronize()
        copies += batch
        moved += batch * n
        _pace(t0, moved, p.rate, done)
    wall = time.monotonic() - t0
    return {"bytes": moved, "copies": copies, "seconds": wall}


def _gemm_loop(torch: Any, done: Clock, n: int = 8192, per_sync: int = 4) -> int:
    a = bf16_square(torch, n)
    b = bf16_square(torch, n)
    count = 0
    while not done():
        for _ in range(per_sync):
            a @ b
        torch.cuda.synchronize()
        count += per_sync
    return count


def run_overlap(torch: Any, p: Phase, done: Clock) -> dict[str, Any]:
    n = p.size
    host = torch.ones(n, dtype=torch.uint8, pin_memory=p.pinned)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    moved = [0]

    def copier() -> None:
        with torch.cuda.stream(stream):
            while not done():
                dev.copy_(host, non_blocking=p.pinned)
                stream.synchronize()
                moved[0] += n

    torch.randn(8, 8, device="cuda", dtype=torch.bfloat16) @ torch.randn(
        8, 8, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    done.start()
    t0 = time.monotonic()
    thread = threading.Thread(target=copier, daemon=True)
    thread.start()
    gemms = _gemm_loop(torch, done)
    thread.join(timeout=30)
    return {"bytes": moved[0], "gemms": gemms, "seconds": time.monotonic() - t0}


def run_feed(torch: Any, p: Phase, done: Clock) -> dict[str, Any]:
    host = torch.ones(p.size, dtype=torch.uint8)
    dev = torch.empty(p.size, dtype=torch.uint8, device="cuda")
    a = bf16_square(torch, 2048)
    torch.tanh(a @ a).float().mean().item()
    done.start()
    t0, moved, steps = time.monotonic(), 0, 0
    while not done():
        dev.copy_(host)  # pageable: staged by the driver, the host thread waits
        x = a
        for _ in range(4):
            x = torch.tanh(x @ a)
        x.float().mean().item()
        moved += p.size
        steps += 1
    return {"bytes": moved, "steps": steps, "seconds": time.monotonic() - t0}


def run_managed(p: Phase, done: Clock) -> dict[str, Any]:
    import cupy
    import numpy

    n = p.size
    mem = cupy.cuda.malloc_managed(n)
    dev = cupy.ndarray((n,), dtype=cupy.uint8, memptr=mem)
    host = numpy.ctypeslib.as_array(ctypes.cast(mem.ptr, ctypes.POINTER(ctypes.c_uint8)),
                                    shape=(n,))
    host[:] = 0
    warm = cupy.zeros(4 * KIB, dtype=cupy.uint8)  # compile both kernels before timing
    warm += 1
    int(warm.sum(dtype=cupy.uint64))
    cupy.cuda.Device().synchronize()
    done.start()
    t0, rounds = time.monotonic(), 0
    while not done():
        if p.pinned:  # "full": every byte on both sides
            host += 1
            dev += 1
        else:  # one byte per page on the host, a full read on the device
            host[:: 4 * KIB] += 1
            int(dev.sum(dtype=cupy.uint64))
        cupy.cuda.Device().synchronize()
        rounds += 1
    wall = time.monotonic() - t0
    # each round migrates the buffer (or its touched pages) to the host and back
    return {"rounds": rounds, "seconds": wall, "bytes": 2 * n * rounds,
            "note": "bytes: 2 x size per round (an upper bound for the page variant)"}


def run_hold(torch: Any, p: Phase, done: Clock) -> dict[str, Any]:
    held = torch.empty(GIB, dtype=torch.uint8, device="cuda")
    small = torch.ones(4, device="cuda")
    torch.cuda.synchronize()
    done.start()
    t0, kernels = time.monotonic(), 0
    while not done():
        if p.kind == "notebook":
            (small * 2).sum().item()  # a cell that touches the GPU now and then
            kernels += 1
        done.wait(3.0)
    del held
    return {"bytes": 0, "kernels": kernels, "seconds": time.monotonic() - t0}


def run_phase(torch: Any, p: Phase, done: Clock) -> dict[str, Any]:
    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "hold": lambda: run_hold(torch, p, done),
        "notebook": lambda: run_hold(torch, p, done),
        "copy": lambda: run_copy(torch, p, done),
        "overlap": lambda: run_overlap(torch, p, done),
        "feed": lambda: run_feed(torch, p, done),
        "managed": lambda: run_managed(p, done),
    }
    stats = runners[p.kind]()
    stats["bytes_per_second"] = per_second(stats.get("bytes", 0), stats.get("seconds") or 0.0)
    return stats


def transfers(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    """Every phase (or ``--phases``) back to back, ``--gap`` quiet seconds after each; a phase
    that fails reports its error in ``phase_done`` and the run goes on."""
    names = [n for n in args.phases.split(",") if n] or list(BY_NAME)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise BadArgs(f"unknown phase(s) {unknown}")
    torch: Any = None
    info: dict[str, Any] = {"dry_run": args.dry_run, "phases": names}
    if not args.dry_run:
        torch = load_torch()
        torch.ones(1, device="cuda").sum().item()
        info.update(name=torch.cuda.get_device_name(0), **versions(torch))
    emit("ready", info=info)
    for name in names:
        if stop.event.is_set():
            break
        p = BY_NAME[name]
        emit("phase", name=name, wall=time.time())
        done = Clock(name, args.phase_seconds, stop.event)
        try:
            if args.dry_run:
                stop.event.wait(args.phase_seconds)
                stats: dict[str, Any] = {"dry_run": True}
            else:
                stats = run_phase(torch, p, done)
                torch.cuda.empty_cache()
        except Exception as exc:  # one phase lost, not the run
            stats = {"error": f"{type(exc).__name__}: {exc}"}
        emit("phase_done", name=name, wall=time.time(), stats=stats)
        stop.event.wait(args.gap)
    return {"phases": len(names)}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--phase-seconds", type=float, default=7.0)
    ap.add_argument("--gap", type=float, default=1.0, help="quiet seconds between phases")
    ap.add_argument("--phases", default="", help=f"comma-separated subset of {list(BY_NAME)}")


FAMILY = Family(
    name="transfer",
    summary="the [transfers] run (transfers.py): every bus phase in one process",
    add_arguments=add_arguments,
    runners={"transfers": transfers},
    dry_run=transfers,  # its dry run still walks the phases (as sleeps)
    seconds=None,
    descriptions={"transfers": "every bus phase (or --phases) for --phase-seconds each"},
)
