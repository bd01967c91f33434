"""The GPUs of one job judged together: how much of each GPU's time went to waiting on its
peers, where it went otherwise, and which GPU, if any, everyone waits for.

In a synchronous job (data parallel, tensor parallel, a pipeline) a rank that is ready early
does not go idle: it enters the next collective or receive, whose kernel stays resident and
spins until its peers arrive. So waiting is kernel time that does no work: *hollow* time,
kernel time minus SM active. Hollow time has three sources, and waiting is what is left of
it once the other two are taken out (:func:`waiting`):

- the job's own kernels' hollow time (a GEMM leaves SMs empty as it ramps up and in its
  last wave, the more the smaller it is, and kernels next to a stall or a copy more than in
  a steady stream): learned per job where its counters tell it (:class:`OwnLearner`:
  exactly from windows without any collective, capped by the rank that waits least, raised
  by the rank everyone waits for), else ``own_hollow_ratio`` of kernel time, plus
  ``EDGE_HOLLOW`` of each second without a kernel. A GEMM's tensor activity per SM-active
  second is about the same from 4096- to 8192-square (``tensor_per_sm_active_second``),
  so at own hollowness ``r`` the tensor counter says its kernels ran
  ``tensor / (0.955 (1 - r))``;
- the transfer a collective really needs: link bytes at what one direction of the link
  carries while a collective runs (``collective_link_bytes_per_second``), and no less than
  ``collective_latency_seconds`` per collective where NCCL's RAS counts them; where it
  does, the tensor-core kernels next to each collective ramp up hollow too
  (``collective_ramp_seconds``, :func:`ramp_hollow`);
- the spinning kernel's own SM activity, which hides part of the waiting: a collective keeps
  some SMs busy (the share is read from the tensor pipes where the job computes with them,
  else ``collective_sm_active``), a point-to-point receive almost none.

This measures waiting against what the GPU would need with no peer to wait for, not against
the least-waiting peer, so imbalance that moves between ranks and a pipeline's fill and
drain bubbles count: every rank waits, and every rank's waiting is counted. The excess over
the least-hollow peer is kept as a floor (where one rank is the slow one, it is the most
direct evidence there is).

Measured live on four H200 (docs/validation/lost-h200.md): waited shares within 0.05 of the
ranks' own CUDA-event timing (0.043 at worst, the pipeline) for rotating imbalance (0.35), a
4-stage pipeline (0.44), a 10 % straggler (0.18), a host stall (0.96), a late joiner (0.42),
balanced compute and a tensor-parallel-like job (0.22-0.28).

The straggler is the GPU everyone waits for: the one that waits least while a peer exchanging
data waits at least ``straggler_gap`` more and twice as much, held for
``straggler_confirm_seconds`` on end.

The time split (:func:`split`) reads one profiling window only: kernel time is graphics
activity, transfer its NVLink bytes and, for copies, its PCIe bytes at what a pinned copy
reaches of the link (:func:`~exporter.model.core.host_copy_time`), waiting the above, host
time the rest. Waiting is counted in any collective, whatever bytes it moves
(:func:`exchanging`).

Where it can be fooled (docs/efficiency.md): a job whose own kernels are hollower than the
default (small GEMMs, tiny kernels) and that always communicates with every rank waiting
reads the difference as waiting; without NCCL's count (CUDA graphs, no RAS) a
latency-bound collective's own time reads as waiting; a GPU shared with another job's
kernels; collective traffic over a NIC is not subtracted as transfer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.model.config import ModelConfig
from exporter.model.core import (
    Assessment,
    Window,
    bus_fed,
    host_copy_time,
    kernel_time,
)
from exporter.model.regimes import BY_NAME

WORKING, TRANSFERRING, WAITING, HOST_STALLED, IDLE_PART = (
    "working", "transferring", "waiting", "host_stalled", "idle")
PARTS: tuple[str, ...] = (WORKING, TRANSFERRING, WAITING, HOST_STALLED, IDLE_PART)
"""Where a job's GPU-seconds go; each GPU's parts sum to its seconds in the job."""


def hollow(w: Window, a: Assessment) -> float | None:
    """Kernel time not backed by SM activity, 0..1; None when profiling cannot tell."""
    if not w.profiling_available or not BY_NAME[a.regime].hollow_read:
        return None
    busy = kernel_time(w, usable=True)
    if busy is None or w.sm_active is None:
        return None
    return max(busy - w.sm_active, 0.0)


def exchanging(w: Window, cfg: ModelConfig) -> bool:
    """The GPU takes part in a collective, whatever bytes it moves: any NVLink traffic at
    or above ``collective_floor_bytes_per_second`` (a barrier-like 4-byte all-reduce per
    step moved 48 KB/s each way on H200; an idle or lone GPU's NVLink reads exactly 0),
    PCIe traffic above the bus floor (a collective across nodes or without NVLink), any
    collective NCCL's RAS counts, or links that are not read at all."""
    unknown = w.nvlink_bytes_per_second is None and not w.bus_bytes_per_second
    return unknown or bus_fed(w, cfg) or (w.collectives_per_second or 0.0) > 0.0 or (
        (w.nvlink_bytes_per_second or 0.0) >= cfg.collective_floor_bytes_per_second
    )


def _directions(w: Window, link: str | None = None) -> tuple[float, float]:
    rates: dict[str, float] = {}
    for name, direction, rate in w.bus_bytes_per_second:
        if link is None or name == link:
            rates[direction] = rates.get(direction, 0.0) + max(rate, 0.0)
    return rates.get("rx", 0.0), rates.get("tx", 0.0)


def transfer_time(w: Window, cfg: ModelConfig) -> float:
    """Share of the window this GPU's collectives need alone: its NVLink bytes (the busier
    direction at ``collective_link_bytes_per_second``), and no less than
    ``collective_latency_seconds`` for each collective NCCL's RAS counts (a small one's
    time is latency, not bytes)."""
    rx, tx = _directions(w, "nvlink")
    busier = max(rx, tx)
    if not busier and w.nvlink_bytes_per_second:
        busier = w.nvlink_bytes_per_second / 2  # both directions summed, split unknown
    moving = busier / cfg.collective_link_bytes_per_second
    latency = (w.collectives_per_second or 0.0) * cfg.collective_latency_seconds
    return min(max(moving, latency), 1.0)


RAMP_TENSOR_MIN = 0.005
"""Tensor activity above which a GPU computes on the tensor pipes in the window, so its
kernels refill the SMs after each collective (``collective_ramp_seconds``)."""


def ramp_hollow(w: Window, cfg: ModelConfig) -> float:
    """Share of the window the compute kernels next to each collective stand hollow while
    they refill the SMs: ``collective_ramp_seconds`` per collective NCCL's RAS counts, where
    the GPU computes on the tensor pipes, and no longer than their SMs' work (a 5 us GEMM
    between collectives does not stand 8 us more); 0 where the count is not known."""
    tensor = w.tensor_active or 0.0
    if tensor <= RAMP_TENSOR_MIN:
        return 0.0
    ramp = (w.collectives_per_second or 0.0) * cfg.collective_ramp_seconds
    return min(ramp, tensor / cfg.tensor_per_sm_active_second)  # no longer than their work


@dataclass(frozen=True)
class Own:
    """How hollow a job's own compute kernels are: ``ratio`` of their time with SMs empty,
    and the tensor-pipe activity per second of them (``tensor``). Learned per job
    (:class:`OwnLearner`); the configured GEMM defaults until there is something to learn."""

    ratio: float
    tensor: float
    learned: bool = False

    @classmethod
    def of(cls, ratio: float, cfg: ModelConfig, learned: bool = False) -> Own:
        """GEMMs ``ratio`` hollow: their tensor activity per second of kernel time is what
        each SM-active second shows (``tensor_per_sm_active_second``: 0.948-0.971 for
        4096- to 8192-square GEMMs on H200, lower only for small ones) times the share of
        it the SMs are active."""
        return cls(ratio, cfg.tensor_per_sm_active_second * (1.0 - ratio), learned)

    @classmethod
    def default(cls, cfg: ModelConfig) -> Own:
        return cls.of(cfg.own_hollow_ratio, cfg)


def spin_sm_active(w: Window, cfg: ModelConfig, own: Own | None = None) -> float:
    """SM active of this GPU's kernels while they wait or transfer. Where the job computes
    on the tensor pipes, what SM activity its compute does not explain belongs to the
    collective (measured, whatever NCCL does); else a collective's typical share (data both
    ways on the links) or almost none for a one-way send or receive (a pipeline stage)."""
    own = own or Own.default(cfg)
    busy = kernel_time(w, usable=True)
    if busy is not None and w.sm_active is not None and (w.tensor_active or 0.0) >= 0.1:
        compute = min((w.tensor_active or 0.0) / own.tensor, busy)
        if busy - compute > 0.05:
            rest = w.sm_active - (1.0 - own.ratio) * compute
            return min(max(rest / (busy - compute), 0.0), 0.3)
    rx, tx = _directions(w)
    one_way = max(rx, tx) >= cfg.bus_floor_bytes_per_second and min(rx, tx) < 0.1 * max(rx, tx)
    return min(cfg.p2p_sm_active if one_way else cfg.collective_sm_active, 0.99)


EDGE_HOLLOW = 0.03
"""Hollow time a GPU's own kernels show per second without a kernel in the window: on H200
the kernels next to host stalls and copies are hollower than in a steady stream (8192-square
GEMMs 0.035 hollow in a full second of them; 0.08-0.09 of the window hollow in seconds
half stalled; 0.17 of kernel time between 512 MiB host-to-device copies), whatever the
job waits."""


def waiting(w: Window, h: float, floor_excess: float, cfg: ModelConfig,
            own_hollow: Own | None = None) -> float:
    """Share of the window this GPU's kernels waited on its peers: hollow time beyond its own
    kernels' and the transfer's, corrected for the SMs a waiting kernel keeps busy; at least
    its excess hollow time over the least-hollow peer (``floor_excess``)."""
    own_hollow = own_hollow or Own.default(cfg)
    busy = kernel_time(w, usable=True) or 0.0
    spin = spin_sm_active(w, cfg, own_hollow)
    own = own_hollow.ratio
    moving = transfer_time(w, cfg)
    edges = EDGE_HOLLOW * max(1.0 - busy, 0.0) + ramp_hollow(w, cfg)
    beyond_own = max(h - own * busy - edges, 0.0) / max(1.0 - spin - own, 0.01)
    absolute = min(max(beyond_own - moving, 0.0), max(busy - moving, 0.0))
    return min(max(absolute, floor_excess / max(1.0 - spin, 0.01)), busy)


def split(w: Window, waited: float, cfg: ModelConfig) -> dict[str, float] | None:
    """This window's share of each part (summing to 1); None when kernel time is unknown.
    No compute process on the GPU: idle. No kernel resident otherwise: stalled on the host,
    except the time its PCIe bytes need (:func:`~exporter.model.core.host_copy_time`),
    which is transfer."""
    busy = kernel_time(w, usable=True)
    if busy is None:
        return None
    busy = min(max(busy, 0.0), 1.0)
    if w.processes == 0 and busy == 0.0:
        return {**dict.fromkeys(PARTS, 0.0), IDLE_PART: 1.0}
    copies = min(host_copy_time(w), 1.0 - busy)
    waited = min(max(waited, 0.0), busy)
    moving = min(transfer_time(w, cfg), busy - waited)
    return {
        WORKING: busy - waited - moving,
        TRANSFERRING: moving + copies,
        WAITING: waited,
        HOST_STALLED: 1.0 - busy - copies,
        IDLE_PART: 0.0,
    }


@dataclass
class Smoothed:
    """An exponential average with time constant ``tau`` that is a plain mean until ``tau``
    seconds have been seen: a job's first window weighs no more than the next ones."""

    value: float = 0.0
    seconds: float = 0.0

    def add(self, x: float, seconds: float, tau: float) -> float:
        self.seconds += seconds
        weight = seconds / max(min(self.seconds, tau), 1e-9)
        self.value += min(weight, 1.0) * (x - self.value)
        return self.value


OWN_MAX = 0.5
LEARN_SECONDS = 30.0
"""Time constant of what a job learns of its own kernels (a plain mean over its first
windows)."""
LEARN_MIN_SECONDS = 3.0
"""Seconds of such windows before what is learned replaces the configured defaults."""


def own_observation(w: Window, a: Assessment, cfg: ModelConfig,
                    held_back: bool) -> tuple[float, float] | None:
    """(hollow share, tensor activity) per second of this GPU's own kernels, from a window
    in which it provably waits on nobody: it takes part in no collective (no link traffic
    at all, not even a barrier's: :func:`exchanging`) and no peer holds it back. All its
    hollow time is then its own kernels', whatever their size (0.067 measured for
    4096-square bf16 GEMMs on H200, against 0.04 for 8192-square ones). None otherwise,
    and where there is no tensor work to scale it by."""
    if held_back or exchanging(w, cfg) or not BY_NAME[a.regime].hollow_read:
        return None
    busy = kernel_time(w, usable=True)
    if busy is None or busy < 0.2 or w.sm_active is None:
        return None
    tensor = w.tensor_active or 0.0
    if tensor < 0.1:
        return None
    return min(max(busy - w.sm_active, 0.0) / busy, OWN_MAX), min(tensor / busy, 1.0)


def least_waiting_observation(
    job: Mapping[str, tuple[Window, Assessment]],
    hollows: Mapping[str, float],
    cfg: ModelConfig,
) -> float | None:
    """An upper bound on the job's own hollow share, from across its ranks: where one busy
    rank is far less hollow than its peers (it is the one they wait for), its hollow time
    beyond its transfer is its own kernels' plus the little it waits itself. None where the
    ranks are alike (rotating imbalance, bubbles, balanced work: their hollow time is as much
    waiting as their own), or the least hollow one is not busy computing (a rank stalled on
    its host runs a few tiny kernels)."""
    if len(hollows) < 2:
        return None
    least = min(hollows, key=lambda g: (hollows[g], g))
    most = max(hollows.values())
    if most - hollows[least] < STRAGGLER_HOLLOW_GAP or hollows[least] > most / 2:
        return None
    w, _a = job[least]
    busy = kernel_time(w, usable=True)
    if busy is None or busy < 0.5 or (w.tensor_active or 0.0) < 0.1:
        return None
    if hollows[least] > BOUND_MAX * busy:
        return None  # it waits a good part itself (a pipeline's heavier stage: 0.15)
    spin = spin_sm_active(w, cfg)
    beyond = hollows[least] - (1.0 - spin) * transfer_time(w, cfg)
    return min(max(beyond / busy, 0.0), OWN_MAX)


def ceiling_observation(job: Mapping[str, tuple[Window, Assessment]],
                        cfg: ModelConfig) -> float | None:
    """The most hollow the job's own compute kernels can be this window, from the rank that
    waits least: its GEMMs ran at least ``tensor / tensor_per_sm_active_second`` SM-active
    seconds, so at own hollowness ``r`` at least that over ``1 - r`` seconds of kernel time,
    and that cannot exceed its kernel time less its collectives' transfer (its waiting is
    never negative). A rank that waits nearly nothing (a balanced job's, a straggler, the
    GPU a late joiner holds back) puts the ceiling close to the truth: 0.01-0.04 for
    8192-square bf16 GEMMs on H200; a job whose ranks all wait a good part (a decode step's
    small all-reduces, rotating imbalance, a pipeline) gets a loose one (0.23-0.48) and
    keeps what it learned otherwise. None where no rank computes on the tensor pipes most
    of the window."""
    ceilings = []
    for w, a in job.values():
        busy = kernel_time(w, usable=True)
        tensor = w.tensor_active or 0.0
        if (not w.profiling_available or not BY_NAME[a.regime].hollow_read
                or busy is None or busy < 0.5 or tensor < 0.1):
            continue
        compute_room = max(busy - transfer_time(w, cfg), 1e-3)
        ceilings.append(1.0 - tensor / (cfg.tensor_per_sm_active_second * compute_room))
    return min(max(min(ceilings), 0.0), OWN_MAX) if ceilings else None


BOUND_MAX = 0.15
"""The least hollow rank bounds the job's own hollowness only while at most this share of
its kernel time is hollow: the 3072-square GEMMs of a rank its peer waited 0.29 for read
0.12 (it waited 0.03 itself); a pipeline's heavier stage, which waits out the fill, 0.18."""
STRAGGLER_HOLLOW_GAP = 0.1
"""Hollow share by which the least hollow busy rank must trail its most hollow peer (and be
at most half of it) to bound the job's own hollowness: a rank everyone waits for."""


@dataclass
class OwnLearner:
    """What a job has learned of its own kernels: how hollow they are and how much tensor
    activity a second of them shows, from its windows without any collective
    (:func:`own_observation`); else a floor from the rank everyone waits for
    (:func:`least_waiting_observation`) and a ceiling from the rank that waits least
    (:func:`ceiling_observation`) around the configured default. Two jobs with the same
    kernels and the same counters, one of them syncing through tiny collectives, differ
    only in that traffic, so a job whose ranks all wait in every window keeps the default."""

    ratio: Smoothed = field(default_factory=Smoothed)
    tensor: Smoothed = field(default_factory=Smoothed)
    bound: Smoothed = field(default_factory=Smoothed)
    """From the rank the others wait for (:func:`least_waiting_observation`)."""
    ceiling: Smoothed = field(default_factory=Smoothed)
    """From the rank that waits least, every window (:func:`ceiling_observation`)."""

    def add(self, observations: list[tuple[float, float]], seconds: float,
            bound: float | None = None, ceiling: float | None = None) -> None:
        if observations:
            n = len(observations)
            self.ratio.add(sum(o[0] for o in observations) / n, seconds, LEARN_SECONDS)
            self.tensor.add(sum(o[1] for o in observations) / n, seconds, LEARN_SECONDS)
        if bound is not None:
            self.bound.add(bound, seconds, LEARN_SECONDS)
        if ceiling is not None:
            self.ceiling.add(ceiling, seconds, LEARN_SECONDS)

    def own(self, cfg: ModelConfig) -> Own:
        """Windows alone say it exactly; else the rank everyone waits for bounds it, taken
        only above the configured default (it includes that rank's own little waiting);
        either way no more than the ceiling the least-waiting rank sets."""
        if self.ratio.seconds >= LEARN_MIN_SECONDS:
            return Own(self.ratio.value, max(self.tensor.value, 0.1), learned=True)
        ratio, learned = cfg.own_hollow_ratio, False
        if self.bound.seconds >= LEARN_MIN_SECONDS and self.bound.value > ratio:
            ratio, learned = self.bound.value, True
        if self.ceiling.seconds >= LEARN_MIN_SECONDS and self.ceiling.value < ratio:
            ratio, learned = self.ceiling.value, True
        return Own.of(ratio, cfg, learned) if learned else Own.default(cfg)


@dataclass
class JobTracker:
    """One job's memory between windows: smoothed waiting per GPU, the straggler streak and
    what it has learned of its own kernels."""

    smoothed: dict[str, Smoothed] = field(default_factory=dict)
    learner: OwnLearner = field(default_factory=OwnLearner)
    straggler: str = ""
    candidate: str = ""
    held: float = 0.0
    """Seconds ``candidate`` has held the others back without a break."""
    released: float = 0.0
    """Seconds the named straggler has not."""

    def reset(self) -> None:
        """A new job on the same identity (its processes all ended): nothing carries over."""
        self.smoothed.clear()
        self.learner = OwnLearner()
        self.straggler, self.candidate, self.held, self.released = "", "", 0.0, 0.0

    def level(self, gpu: str, value: float, seconds: float, cfg: ModelConfig) -> float:
        return self.smoothed.setdefault(gpu, Smoothed()).add(
            value, seconds, cfg.straggler_window_seconds)

    def name(self, candidate: str, seconds: float, cfg: ModelConfig) -> str:
        """Name ``candidate`` ("" for none this window) once it has held long enough; keep a
        named straggler through a short break."""
        if candidate and candidate == self.candidate:
            self.held += seconds
        else:
            self.candidate, self.held = candidate, (seconds if candidate else 0.0)
        if candidate and self.held >= cfg.straggler_confirm_seconds:
            self.straggler, self.released = candidate, 0.0
        elif self.straggler and candidate != self.straggler:
            self.released += seconds
            if self.released >= cfg.straggler_window_seconds:
                self.straggler, self.released = "", 0.0
        return self.straggler


@dataclass(frozen=True)
class JobJudgement:
    straggler: str
    waiting: frozenset[str]
    """GPUs that wait on the named straggler."""
    waited_share: Mapping[str, float]
    """gpu -> estimated share of the window it waited on its peers."""
    parts: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """gpu -> this window's share of each of :data:`PARTS` (GPUs with known kernel time)."""


def judge(
    job: Mapping[str, tuple[Window, Assessment]],
    tracker: JobTracker,
    seconds: float,
    cfg: ModelConfig,
) -> JobJudgement:
    """Each GPU's waiting and time split for this window, and the job's straggler."""
    if job and all(w.processes == 0 for w, _a in job.values()):
        tracker.reset()
    # Regimes whose hollow time is read (Regime.hollow_read): a rank stalled on its host
    # can have no kernel resident at all (allocated_idle) and still hold its peers back.
    hollows = {g: h for g, (w, a) in job.items() if (h := hollow(w, a)) is not None}
    low = min(hollows.values(), default=0.0)
    busy = {g: kernel_time(w, usable=True) or 0.0 for g, (w, _a) in job.items()}
    tracker.learner.add([o for g, (w, a) in job.items() if (o := own_observation(
        w, a, cfg, _peer_holds_back(g, busy))) is not None], seconds,
        least_waiting_observation(job, hollows, cfg), ceiling_observation(job, cfg))
    own = tracker.learner.own(cfg)
    shares: dict[str, float] = {}
    for gpu, (w, a) in job.items():
        can = gpu in hollows and BY_NAME[a.regime].can_wait and (
            exchanging(w, cfg) or _peer_holds_back(gpu, busy))
        shares[gpu] = waiting(w, hollows[gpu], hollows[gpu] - low, cfg, own) if can else 0.0
    levels = {g: tracker.level(g, shares[g], seconds, cfg) for g in hollows}
    for gone in set(tracker.smoothed) - set(levels):
        tracker.smoothed.pop(gone)
    candidate, waiters = _candidate(levels, shares, job, cfg)
    straggler = tracker.name(candidate, seconds, cfg)
    if straggler != candidate:
        waiters = _waiters(straggler, levels, shares, job, cfg) if straggler in levels else set()
    parts = {g: p for g, (w, _a) in job.items() if (p := split(w, shares[g], cfg)) is not None}
    return JobJudgement(straggler, frozenset(waiters if straggler else ()), shares, parts)


def _peer_holds_back(gpu: str, busy: Mapping[str, float]) -> bool:
    """A peer runs kernels for at most half as long as this GPU (its host stalls it, or it
    has not joined yet): a collective waiting for it moves no bytes, yet it waits."""
    return busy[gpu] >= 0.5 and any(b <= busy[gpu] / 2 for g, b in busy.items() if g != gpu)


def _candidate(
    levels: Mapping[str, float],
    shares: Mapping[str, float],
    job: Mapping[str, tuple[Window, Assessment]],
    cfg: ModelConfig,
) -> tuple[str, set[str]]:
    """The GPU that waits least, if some peer waits on it this window, and those peers."""
    if len(levels) < 2:
        return "", set()
    low = min(levels, key=lambda g: (levels[g], g))
    waiters = _waiters(low, levels, shares, job, cfg)
    return (low, waiters) if waiters else ("", set())


def _waiters(
    straggler: str,
    levels: Mapping[str, float],
    shares: Mapping[str, float],
    job: Mapping[str, tuple[Window, Assessment]],
    cfg: ModelConfig,
) -> set[str]:
    """Peers whose smoothed waiting exceeds the straggler's by ``straggler_gap`` and is at
    least twice it: waiting alike (rotating imbalance, bubbles) names nobody."""
    base = levels[straggler]
    return {
        g for g, level in levels.items()
        if g != straggler and shares[g] > 0.0 and level - base >= cfg.straggler_gap
        and base <= level / 2 and exchanging(job[g][0], cfg)
    }
