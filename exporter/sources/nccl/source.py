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
from collections.abc import Callable, Iterable, Mapping

import structlog

from exporter.readings import CollectiveReading, PodAssignments, PodJobs, ProcessInfo
from exporter.snapshot import Snapshot, SourceResult
from exporter.sources.base import Source
from exporter.sources.jobs.reader import Reader, read_small
from exporter.sources.nccl import ras
from exporter.sources.nccl.config import NcclConfig
from exporter.sources.nccl.counting import CollectiveCounter

SOURCE = "nccl"
log = structlog.get_logger(SOURCE)


def innermost_pid(proc_root: str, pid: int) -> int | None:
    """The PID ``pid`` has in its own (innermost) namespace, from ``NSpid`` in its status
    (opened as the job sources open /proc files: no FIFO blocks, no symlink is followed)."""
    try:
        data = read_small(f"{proc_root}/{pid}/status", STATUS_BYTES)
    except OSError:
        return None  # gone, or not ours to read
    for line in data.decode("ascii", "replace").splitlines():
        if line.startswith("NSpid:"):
            fields = line.split()[1:]
            return int(fields[-1]) if fields and fields[-1].isdigit() else None
    return None


STATUS_BYTES = 16384
"""More than a /proc/<pid>/status holds (about 1.5 KB)."""


def gpu_lookup(processes: Iterable[ProcessInfo], inner_pids: Mapping[int, int | None]
               ) -> Callable[[ras.RasRank], str | None]:
    """rank -> the ``gpu`` label it runs on, None where no GPU process here is it.
    ``inner_pids`` maps a GPU process's host PID to its PID in its own namespace."""
    by_pid: dict[int, set[str]] = {}
    for p in processes:
        by_pid.setdefault(p.pid, set()).add(p.gpu)
    inner: dict[int, set[str]] = {}
    for pid, gpus in by_pid.items():
        own = inner_pids.get(pid)
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
        self._reader = Reader(f"source-{SOURCE}-read")
        self._inner: dict[int, int | None] = {}
        """GPU process (host PID) -> its PID in its own namespace, read once per process."""
        self._last_error = ""

    async def _ask(self, address: str) -> list[ras.RasStatus | ras.RasError]:
        host, port = _address(address)

        async def one() -> ras.RasStatus | ras.RasError:
            try:
                return await ras.status(host, port, self.cfg.timeout, self.cfg.max_body_bytes)
            except ras.RasError as exc:
                return exc

        return list(await asyncio.gather(*(one() for _ in range(self.cfg.connections))))

    async def _inner_pids(self, processes: tuple[ProcessInfo, ...],
                          statuses: list[ras.RasStatus], errors: Counter[str]
                          ) -> Mapping[int, int | None]:
        """The GPU processes' own PIDs, read only where a rank's PID is no host PID here (a
        rank in a container), once per process, each read bounded in time on the job
        sources' reader (a stuck /proc read costs its thread, never the poll)."""
        host = {p.pid for p in processes}
        for gone in set(self._inner) - host:
            del self._inner[gone]
        if all(r.pid in host for st in statuses for c in st.communicators for r in c.ranks):
            return self._inner
        new = sorted(host - set(self._inner))
        if new:
            read = await asyncio.to_thread(
                self._reader.map, lambda pid: innermost_pid(self.cfg.proc_root, pid), new)
            for pid, got in zip(new, read, strict=True):
                if isinstance(got, BaseException):
                    errors["proc_read_timeout"] += 1  # read again once the stuck read ends
                else:
                    self._inner[pid] = got
        return self._inner

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
        errors = Counter(f.reason for f in failures)
        processes = self._processes()
        inner = await self._inner_pids(processes, statuses, errors)
        self._counter.observe(statuses, gpu_lookup(processes, inner), now)
        reading = CollectiveReading(
            gpus=self._counter.states(),
            answered=bool(statuses),
            communicators=self._counter.communicators,
            dropped=tuple(sorted(self._counter.dropped.items())),
        )
        self._log(failures, bool(statuses))
        if failures and not statuses:
            first = failures[0]
            return SourceResult(source=SOURCE, ok=False, reason=first.reason,
                                error=f"nccl ras: {first}", reading=reading)
        return SourceResult(source=SOURCE, reading=reading, errors=dict(errors),
                            stuck_reads=self._reader.stuck())

    def _log(self, failures: list[ras.RasError], answered: bool) -> None:
        """One line when an endpoint starts failing while others answer (a failure of them
        all is the scheduler's ``source_failed``), and none again until the reason changes."""
        error = str(failures[0]) if failures and answered else ""
        if error and error != self._last_error:
            log.warning("nccl_ras_endpoint_failed", reason=failures[0].reason, error=error,
                        failed=len(failures))
        self._last_error = error

    async def close(self) -> None:
        self._reader.stop()
