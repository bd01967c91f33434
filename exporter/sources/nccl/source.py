"""The NCCL source: asks each RAS endpoint for its job's status and counts, per GPU, the
collectives its ranks launched (``CollectiveReading``).

Ranks are placed on GPUs by PID: the GPU processes NVML lists (the host's PIDs), else a
container's own PID through ``NSpid`` in the host's /proc; a process driving several GPUs
is placed by the rank's NVML device index. Ranks on other nodes (a multi-node job's status
lists them all) match no process here and are skipped.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from exporter.readings import CollectiveReading, PodAssignments, PodJobs, ProcessInfo
from exporter.snapshot import Snapshot, SourceResult
from exporter.sources.base import Source
from exporter.sources.nccl import ras
from exporter.sources.nccl.config import NcclConfig
from exporter.sources.nccl.counting import CollectiveCounter

SOURCE = "nccl"


def innermost_pid(proc_root: Path, pid: int) -> int | None:
    """The PID ``pid`` has in its own (innermost) namespace, from ``NSpid``."""
    try:
        with open(proc_root / str(pid) / "status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    fields = line.split()[1:]
                    return int(fields[-1]) if fields and fields[-1].isdigit() else None
    except OSError:
        return None
    return None


def gpu_lookup(processes: Iterable[ProcessInfo], proc_root: Path
               ) -> Callable[[ras.RasRank], str | None]:
    """rank -> the ``gpu`` label it runs on, None where no GPU process here is it."""
    by_pid: dict[int, set[str]] = {}
    for p in processes:
        by_pid.setdefault(p.pid, set()).add(p.gpu)
    inner: dict[int, set[str]] = {}
    for pid, gpus in by_pid.items():
        own = innermost_pid(proc_root, pid)
        if own is not None and own != pid:
            inner.setdefault(own, set()).update(gpus)

    def gpu_of(rank: ras.RasRank) -> str | None:
        gpus = by_pid.get(rank.pid) or inner.get(rank.pid)
        if not gpus:
            return None
        if len(gpus) == 1:
            return next(iter(gpus))
        mine = str(rank.nvml_dev)
        return mine if mine in gpus else None

    return gpu_of


MAX_POD_ADDRESSES = 64
"""Pods asked per poll at most (a node holds a few GPU pods; more are dropped and counted)."""


def pod_addresses(snap: Snapshot, port: int) -> list[str]:
    """host:port of every pod holding a GPU here whose IP the API server told."""
    pods = snap.get(PodAssignments)
    named = snap.get(PodJobs)
    if pods is None or named is None:
        return []
    ips = [named.ips[key] for key in pods.pod_gpus() if key in named.ips]
    return [f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip in sorted(set(ips))]


def _address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class NcclSource(Source):
    name = SOURCE

    def __init__(self, cfg: NcclConfig, processes: Callable[[], tuple[ProcessInfo, ...]],
                 clock: Callable[[], float] = time.monotonic,
                 pods: Callable[[], list[str]] = list) -> None:
        self.cfg = cfg
        self._clock = clock
        self._pods = pods
        self.interval = cfg.interval
        self._processes = processes
        self._counter = CollectiveCounter(cfg.max_communicators, cfg.forget_after)

    async def _ask(self, address: str) -> list[ras.RasStatus | ras.RasError]:
        host, port = _address(address)

        async def one() -> ras.RasStatus | ras.RasError:
            try:
                return await ras.status(host, port, self.cfg.timeout, self.cfg.max_body_bytes)
            except ras.RasError as exc:
                return exc

        return list(await asyncio.gather(*(one() for _ in range(self.cfg.connections))))

    async def poll(self) -> SourceResult:
        addresses = list(self.cfg.addresses)
        if self.cfg.pods:
            pods = [a for a in self._pods() if a not in addresses]
            if len(pods) > MAX_POD_ADDRESSES:
                self._counter.dropped["max_pods"] += len(pods) - MAX_POD_ADDRESSES
            addresses += pods[:MAX_POD_ADDRESSES]
        asked = await asyncio.gather(*(self._ask(address) for address in addresses))
        answers = [a for per_address in asked for a in per_address]
        now = self._clock()
        statuses = [a for a in answers if isinstance(a, ras.RasStatus)]
        failures = [a for a in answers if isinstance(a, ras.RasError) and a.reason != "refused"]
        for failure in failures:
            if failure.reason == "too_large":
                self._counter.dropped["too_large"] += 1
        gpu_of = gpu_lookup(self._processes(), Path(self.cfg.proc_root))
        self._counter.observe(statuses, gpu_of, now)
        reading = CollectiveReading(
            gpus=self._counter.states(),
            answered=bool(statuses),
            communicators=self._counter.communicators,
            dropped=tuple(sorted(self._counter.dropped.items())),
        )
        errors = Counter(f.reason for f in failures)
        if failures and not statuses:
            first = failures[0]
            return SourceResult(source=SOURCE, ok=False, reason=first.reason,
                                error=f"nccl ras: {first}", reading=reading)
        return SourceResult(source=SOURCE, reading=reading, errors=dict(errors))
