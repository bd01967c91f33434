"""NCCL's per-rank collective counts turned into per-GPU totals and launch rates.

RAS reports each rank's count since its communicator was created. A communicator first seen
sets a baseline (the exporter cannot tell when those collectives ran); every later sighting
adds its increase to the GPU's total, so ``goodput_gpu_collectives_total`` is a counter
``rate()`` reads exactly. Each rank's rate is its increase over the span since its previous
sighting: jobs side by side share the RAS port, so a poll may miss a job and the next one
spans both intervals, which keeps the rate exact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from exporter.readings import CollectiveState
from exporter.sources.nccl.ras import RasRank, RasStatus

MAX_RATE = 1e6
"""Collectives a rank can launch per second at most: one takes about 9 us on the GPU and
some microseconds to launch, so 100,000 a second is already out of reach. A count rising
faster is not believed (a process answering on the RAS port with made-up counts): the rank
is re-based and the increase dropped, counted as ``implausible``."""
Key = tuple[str, int]
"""(communicator hash, rank in it)."""


@dataclass
class _Rank:
    gpu: str
    rank: RasRank
    count: int
    at: float
    seen: float
    rate: float | None = None


def local_ranks(ranks: Iterable[RasRank], gpu_of: Callable[[RasRank], str | None]
                ) -> list[tuple[RasRank, str]]:
    """The ranks of one communicator that run here, with their GPUs. A rank whose PID
    matches a GPU process here may still be another node's (PIDs repeat across nodes), so
    of the hosts whose ranks match, only the one with the most matches counts (on a tie,
    the one whose ranks' device indices agree with their GPUs; none if still tied)."""
    by_host: dict[str, list[tuple[RasRank, str]]] = {}
    for rank in ranks:
        gpu = gpu_of(rank)
        if gpu is not None:
            by_host.setdefault(rank.host, []).append((rank, gpu))
    if len(by_host) <= 1:
        return next(iter(by_host.values()), [])

    def score(matched: list[tuple[RasRank, str]]) -> tuple[int, int]:
        return len(matched), sum(str(r.nvml_dev) == gpu for r, gpu in matched)

    ranked = sorted(by_host.values(), key=score, reverse=True)
    return ranked[0] if score(ranked[0]) != score(ranked[1]) else []


class CollectiveCounter:
    """Per-GPU collective totals and rates from successive RAS statuses, within caps."""

    def __init__(self, max_communicators: int, forget_after: float) -> None:
        self.max_communicators = max_communicators
        self.forget_after = forget_after
        self._ranks: dict[Key, _Rank] = {}
        self._totals: dict[str, float] = {}
        self.dropped: Counter[str] = Counter()

    @property
    def communicators(self) -> int:
        return len({comm for comm, _ in self._ranks})

    def observe(self, statuses: Iterable[RasStatus], gpu_of: Callable[[RasRank], str | None],
                now: float) -> None:
        """Take one poll's statuses (several may describe the same job: the highest count
        of a rank wins) taken at ``now``; forget ranks not seen for ``forget_after`` and
        ranks whose process is no longer on their GPU (a missed poll keeps a rank's rate;
        an ended job must not)."""
        latest: dict[Key, tuple[RasRank, str]] = {}
        refused: set[str] = set()
        comms = {comm for comm, _ in self._ranks}
        for status in statuses:
            for comm in status.communicators:
                for rank, gpu in local_ranks(comm.ranks, gpu_of):
                    if comm.hash not in comms:
                        if len(comms) >= self.max_communicators:
                            refused.add(comm.hash)
                            continue
                        comms.add(comm.hash)
                    key = (comm.hash, rank.rank)
                    held = latest.get(key)
                    if held is None or rank.collectives > held[0].collectives:
                        latest[key] = (rank, gpu)
        if refused:
            self.dropped["max_communicators"] += len(refused)
        for key, (rank, gpu) in latest.items():
            self._see(key, rank, gpu, now)
        gone = [k for k, r in self._ranks.items()
                if now - r.seen > self.forget_after or gpu_of(r.rank) != r.gpu]
        for key in gone:  # not seen for long, or its process left the GPU: its job ended
            del self._ranks[key]

    def _see(self, key: Key, rank: RasRank, gpu: str, now: float) -> None:
        count = rank.collectives
        prev = self._ranks.get(key)
        if prev is None or prev.gpu != gpu or count < prev.count:
            self._ranks[key] = _Rank(gpu, rank, count, now, now)  # a baseline
            return
        prev.seen = now
        if now <= prev.at:
            return
        increase = count - prev.count
        if increase > MAX_RATE * (now - prev.at):  # no GPU launches that many: a liar
            self.dropped["implausible"] += 1
            self._ranks[key] = _Rank(gpu, rank, count, now, now)
            return
        self._totals[gpu] = self._totals.get(gpu, 0.0) + increase
        prev.rate = increase / (now - prev.at)
        prev.count, prev.at = count, now

    def states(self) -> dict[str, CollectiveState]:
        """Every GPU with a tracked rank or a total: its total and summed rate."""
        rates: dict[str, list[float]] = {}
        for r in self._ranks.values():
            bucket = rates.setdefault(r.gpu, [])
            if r.rate is not None:
                bucket.append(r.rate)
        gpus = set(rates) | set(self._totals)
        return {
            gpu: CollectiveState(
                total=self._totals.get(gpu, 0.0),
                per_second=sum(rates[gpu]) if rates.get(gpu) else None,
            )
            for gpu in sorted(gpus)
        }
