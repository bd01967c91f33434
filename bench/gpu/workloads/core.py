"""What every workload shares: the JSON-lines protocol, the stop flag, torch loading, device
facts, host work, and the command line that starts one.

Kept free of torch and of any family so the orchestrators import it cheaply and a bare GPU
machine needs nothing beyond the standard library to parse a workload's arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

ENTRY = "bench.gpu.workloads"
# NVLink multicast must stay off on the lent multi-GPU machines (it can take a shared host's
# GPUs out of service); the entry point sets these before torch is imported, so every process
# a workload starts (NCCL ranks, child workloads) inherits them.
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# CUDA index == NVML index, so the daemon's gpu label names the GPU a workload ran on.
DEVICE_ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def command(name: str, *args: str, python: str | None = None) -> list[str]:
    """The one way to start a workload: ``python -m bench.gpu.workloads NAME ARGS`` (run from
    the repository root, or with it on PYTHONPATH)."""
    return [python or sys.executable, "-m", ENTRY, name, *args]


def emit(event: str, **fields: Any) -> None:
    """One protocol line: ``{"event": ..., "time": <unix seconds>, ...}``, written at once
    because the orchestrator starts its clock on ``ready``, and in one write so that ranks
    sharing a launcher's stdout (torchrun) never interleave within a line."""
    import os

    line = json.dumps({"event": event, "time": time.time(), **fields}) + "\n"
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stdout (tests): no descriptor
        sys.stdout.write(line)
        sys.stdout.flush()
        return
    os.write(fd, line.encode())


class BadArgs(Exception):
    """Arguments the parser accepted but the workload cannot use (exit code 2)."""


class Stop:
    """Stop flag (SIGTERM/SIGINT set :attr:`event`) plus a deadline ``seconds`` from now;
    :meth:`restart` moves the deadline, so one class serves a whole run and a single phase."""

    def __init__(self, seconds: float = math.inf, event: threading.Event | None = None) -> None:
        self.seconds = seconds
        self.event = event or threading.Event()
        self.deadline = time.monotonic() + seconds

    def restart(self) -> None:
        self.deadline = time.monotonic() + self.seconds

    def remaining(self) -> float:
        return max(self.deadline - time.monotonic(), 0.0)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` (never past the deadline); True when stopped by a signal."""
        return self.event.wait(min(seconds, self.remaining()))

    def __call__(self) -> bool:
        return self.event.is_set() or time.monotonic() >= self.deadline


Runner = Callable[[Stop, argparse.Namespace], dict[str, Any]]
"""A workload: runs until its stop, emits ``ready`` (and any events of its own) and returns the
stats that ``done`` carries. Errors are raised; the entry point turns them into ``error``."""


@dataclass(frozen=True)
class Family:
    """Workloads that share options and a dry run (one validation run's worth)."""

    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    runners: Mapping[str, Runner]
    dry_run: Runner  # ``--dry-run``: no torch, so the orchestrator runs without a GPU
    seconds: float | None = 30.0  # default --seconds; None: no --seconds, the run paces itself
    wall_seconds: bool = False  # ``done`` also carries wall_seconds (the panel's records do)
    descriptions: Mapping[str, str] = field(default_factory=dict)  # name -> one line (--help)


def idle_dry_run(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    """The plain dry run: ready, wait for the stop, done."""
    emit("ready", info={"dry_run": True})
    stop.event.wait(stop.remaining())
    return {"dry_run": True}


def load_torch(cuda: bool = True, device: int | None = 0) -> Any:
    """Import torch (only here, so ``--dry-run`` and the orchestrators never need it); with
    ``cuda`` fail early when no GPU is visible, and select ``device`` unless it is None."""
    import torch

    if cuda and not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    if cuda and device is not None:
        torch.cuda.set_device(device)
    return torch


def versions(torch: Any) -> dict[str, Any]:
    return {"torch": torch.__version__, "cuda": torch.version.cuda}


def device_info(torch: Any, index: int) -> dict[str, Any]:
    """Enough to match a CUDA device with the daemon's NVML view (uuid, PCI bus id)."""
    props = torch.cuda.get_device_properties(index)
    info = {"index": index, "name": props.name, **versions(torch)}
    for attr in ("uuid", "pci_bus_id", "pci_device_id", "pci_domain_id"):
        value = getattr(props, attr, None)
        if value is not None:
            info[attr] = str(value)
    return info


def bf16_square(torch: Any, n: int, device: Any = "cuda") -> Any:
    """A random bf16 n x n matrix: random, not zeros, so GEMMs draw realistic power."""
    return torch.randn(n, n, device=device, dtype=torch.bfloat16)


def host_work(seconds: float) -> None:
    """Spin the CPU (not sleep) for ``seconds``: stands in for sampling, tokenising, data
    loading or optimizer bookkeeping, which keep a host thread busy."""
    end = time.perf_counter() + seconds
    acc = 0
    while time.perf_counter() < end:
        acc += 1


def per_second(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else 0.0


# --- NCCL ranks, one process per GPU ------------------------------------------------------------

def join_ranks(rank: int, world: int, port: int) -> tuple[Any, Any, Any, threading.Event]:
    """In a spawned rank (or one torchrun started): NVLink multicast off, this rank's GPU
    selected, NCCL joined.
    Returns (torch, torch.distributed, the device, an event SIGTERM/SIGINT set)."""
    import os
    import signal

    os.environ.update(NO_MULTICAST)
    launched = "LOCAL_RANK" in os.environ  # torchrun set the rendezvous and the local rank
    if not launched:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist

    local_stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: local_stop.set())
    signal.signal(signal.SIGINT, lambda *_: local_stop.set())
    local = int(os.environ["LOCAL_RANK"]) if launched else rank
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    return torch, dist, dev, local_stop


def spawn_ranks(stop: Stop, target: Callable[..., None], world: int, *args: Any) -> None:
    """Run ``target(rank, world, port, *args, stop_event, seconds)`` in ``world`` spawned
    processes, one per GPU, until each returns; ``stop`` reaches them as ``stop_event``."""
    import socket

    import torch
    import torch.multiprocessing as mp

    if torch.cuda.device_count() < world:
        raise RuntimeError(f"needs {world} GPUs, torch sees {torch.cuda.device_count()}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stop_event = mp.get_context("spawn").Event()
    threading.Thread(target=lambda: (stop.event.wait(), stop_event.set()), daemon=True).start()
    seconds = max(1.0, stop.deadline - time.monotonic())
    mp.spawn(target, args=(world, port, *args, stop_event, seconds), nprocs=world, join=True)
