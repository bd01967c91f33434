"""One GPU, several holders: what each pod (or process) does with its share.

Time-slicing and MPS hand one GPU to several pods. NVML measures some things per process
and the profiling counters only per GPU, so each figure here is one of two kinds:

- **measured per process**: kernel time and memory traffic from NVML's per-process samples
  (:class:`~exporter.readings.ProcessActivity`), memory held from the compute-process list,
  tokens from the serving engine the holder runs. Kernel time is scaled so the holders of a
  GPU sum to its kernel time (the samples weigh processes against each other; the GPU's own
  window says how much there was);
- **apportioned (an estimate)**: SM activity, tensor and DRAM activity and energy, which the
  GPU measures as a whole. SM activity is *unmixed*: each window says
  ``sm_active = sum(kernel_i x fill_i)``, and windows whose mix of holders differed (one
  started, stopped, burst) pin each holder's fill (least squares over a decaying memory,
  :class:`Unmixer`). Where the mix never differed the windows cannot tell the holders apart
  and each gets the GPU's fill (in proportion to its kernel time). Tensor activity goes with
  SM activity; DRAM with NVML's per-process memory samples; energy with kernel time.

Each holder is then judged like a GPU of its own, in its own frame: the time it could have
had is its kernel time plus the time nobody ran, so a pod time-sliced against a busy
neighbour is not called host-bound for the time the neighbour held the GPU. Its kernel time
and SM activity are averaged over a few seconds first (:data:`SMOOTH_SECONDS`): NVML samples
each process about once a second, so a small holder is missing from some windows' samples.

Under MPS, NVML gives every client's kernel time to the MPS server process (measured on an
H200): the clients are holders with their memory, but their share, SM activity and regime
are unknown (None, ``unknown``) rather than called idle.

A holder is a pod's container (the cgroup source names the pod of each pid) or, outside
any pod, the process itself (``pid``). MIG instances are whole devices to NVML (it has no
per-process samples on MIG): their holders are not split here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from exporter.model.config import ModelConfig
from exporter.model.core import GpuModel, ModelRates, Window, assess, kernel_time
from exporter.readings import (
    GpuState,
    HolderVerdict,
    PodUsageReading,
    ServingState,
    TargetStatus,
)

Holder = tuple[str, str, str, str]
"""(namespace, pod, container, pid): a pod's container (pid "") or a process."""
OTHER: Holder = ("", "", "", "other")
SMOOTH_SECONDS = 5.0
"""Time constant over which a holder's kernel time and SM activity are averaged before its
regime is judged: NVML samples each process about once a second (measured on an H200), so a
holder with a small share is in some windows' samples and not in others."""
RIDGE = 0.05
"""Pull of each holder's fill towards the window's pooled fill, in windows: what decides
the fill of holders that only ever ran in one fixed mix (and keeps the solve stable)."""


@dataclass
class HolderInput:
    """What one holder did in one window, before apportioning."""

    holder: Holder
    pids: tuple[int, ...] = ()
    weight: float = 0.0
    """Sum of its processes' kernel samples (relative: only ratios between holders matter)."""
    memory_weight: float = 0.0
    processes: int = 0
    memory_used_bytes: float | None = None
    mps_clients: int = 0
    """Its processes listed with an MPS compute context."""


def holders_of(
    gpu: str, state: GpuState, usage: PodUsageReading | None
) -> list[HolderInput] | None:
    """The holders on ``gpu`` this window: every pid NVML lists or sampled, grouped by pod
    (or alone). None when the per-process samples were not read."""
    activity = state.process_activity
    if activity is None:
        return None
    pod_of: dict[int, Holder] = {}
    for row in usage.pods if usage is not None else ():
        if row.gpu == gpu:
            for pid in row.pids:
                pod_of[pid] = (row.namespace, row.pod, row.container, "")
    found: dict[Holder, HolderInput] = {}

    def entry(pid: int) -> HolderInput:
        holder = pod_of.get(pid, ("", "", "", str(pid)))
        item = found.setdefault(holder, HolderInput(holder))
        if pid not in item.pids:
            item.pids = (*item.pids, pid)
        return item

    for proc in state.processes:
        item = entry(proc.pid)
        item.processes += 1
        item.mps_clients += int(proc.mps_client)
        if proc.used_memory_bytes is not None:
            item.memory_used_bytes = (item.memory_used_bytes or 0.0) + proc.used_memory_bytes
    for sample in activity:
        item = entry(sample.pid)
        item.weight += sample.kernel
        item.memory_weight += sample.memory
    return sorted(found.values(), key=lambda h: h.holder)


def cap(holders: list[HolderInput], most: int) -> tuple[list[HolderInput], int]:
    """At most ``most`` holders: the busiest (then largest) ``most - 1`` and one ``other``
    holding the rest together; returns them and how many were folded."""
    if len(holders) <= most:
        return holders, 0
    ranked = sorted(holders, key=lambda h: (-h.weight, -(h.memory_used_bytes or 0.0), h.holder))
    kept, rest = ranked[: most - 1], ranked[most - 1 :]
    other = HolderInput(OTHER)
    for h in rest:
        other.pids += h.pids
        other.weight += h.weight
        other.memory_weight += h.memory_weight
        other.processes += h.processes
        if h.memory_used_bytes is not None:
            other.memory_used_bytes = (other.memory_used_bytes or 0.0) + h.memory_used_bytes
    return sorted([*kept, other], key=lambda h: h.holder), len(rest)


@dataclass
class Unmixer:
    """Each holder's SM fill (SM activity per second of its kernel time) on one GPU, by
    least squares over the windows seen, older ones weighing less (half-life
    ``half_life`` seconds), pulled towards each window's pooled fill by :data:`RIDGE`."""

    half_life: float
    a: dict[tuple[Holder, Holder], float] = field(default_factory=dict)
    b: dict[Holder, float] = field(default_factory=dict)

    def fills(self, kernel: Mapping[Holder, float], sm_active: float, seconds: float) -> dict[
        Holder, float
    ]:
        total = sum(kernel.values())
        if total <= 0:
            return {h: 0.0 for h in kernel}
        pooled = min(max(sm_active / total, 0.0), 1.0)
        decay = 0.5 ** (max(seconds, 0.0) / self.half_life)
        for key in list(self.a):
            self.a[key] *= decay
        for h in list(self.b):
            self.b[h] *= decay
        for hi, ki in kernel.items():
            self.b[hi] = self.b.get(hi, 0.0) + ki * sm_active
            for hj, kj in kernel.items():
                self.a[(hi, hj)] = self.a.get((hi, hj), 0.0) + ki * kj
        self._forget(set(kernel))
        keys = sorted(self.b)
        matrix = [[self.a.get((hi, hj), 0.0) + (RIDGE if hi == hj else 0.0) for hj in keys]
                  for hi in keys]
        rhs = [self.b[h] + RIDGE * pooled for h in keys]
        solved = dict(zip(keys, _solve(matrix, rhs), strict=True))
        return {h: min(max(solved.get(h, pooled), 0.0), 1.0) for h in kernel}

    def _forget(self, live: set[Holder]) -> None:
        """Drop holders that are gone and whose evidence has all but decayed."""
        for h in [h for h in self.b if h not in live and self.a.get((h, h), 0.0) < 1e-3]:
            del self.b[h]
            for key in [k for k in self.a if h in k]:
                del self.a[key]


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the system is small and, with the ridge,
    positive definite)."""
    n = len(rhs)
    m = [[*row, rhs[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if abs(m[col][col]) < 1e-12:
            continue
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    out = [0.0] * n
    for r in range(n - 1, -1, -1):
        if abs(m[r][r]) < 1e-12:
            continue
        out[r] = (m[r][n] - sum(m[r][c] * out[c] for c in range(r + 1, n))) / m[r][r]
    return out


def owners(
    gpu: str, rows: Iterable[ModelRates], targets: Iterable[TargetStatus],
    holders: list[HolderInput],
) -> dict[str, Holder]:
    """model -> the one holder whose engine serves it on ``gpu`` (its pod, or one of its
    pids is the engine or a descendant); a model two holders serve belongs to neither."""
    on_gpu = [t for t in targets if gpu in t.gpus]
    out: dict[str, Holder] = {}
    for row in rows:
        named = [t for t in on_gpu if row.model in t.model.split(",")] or on_gpu
        found = {_target_holder(t, holders) for t in named}
        if len(found) == 1 and None not in found:
            (holder,) = found
            assert holder is not None
            out[row.model] = holder
    return out


def _target_holder(target: TargetStatus, holders: list[HolderInput]) -> Holder | None:
    for h in holders:
        ns, pod, _, _ = h.holder
        if target.pod and (target.namespace, target.pod) == (ns, pod):
            return h.holder
        if set(target.pids) & set(h.pids):
            return h.holder
    return None


@dataclass
class _Totals:
    kernel_seconds: float = 0.0
    sm_active_seconds: float = 0.0
    energy_joules: float | None = None


def mps_unsplit(holders: list[HolderInput]) -> bool:
    """MPS clients hold the GPU but none has a per-process sample while some other process
    (the MPS server) has: NVML gives the clients' kernel time to the server (measured on an
    H200, driver 580), so it cannot be split among them."""
    clients = [h for h in holders if h.mps_clients]
    return bool(clients) and not any(h.weight for h in clients) and any(
        h.weight for h in holders)


class HolderModel:
    """Per GPU: the unmixer, each holder's debounce, smoothing and counters, across windows."""

    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        self._unmixers: dict[str, Unmixer] = {}
        self._models: dict[tuple[str, Holder], GpuModel] = {}
        self._totals: dict[tuple[str, Holder], _Totals] = {}
        self._smooth: dict[tuple[str, Holder], tuple[float, float | None]] = {}

    def step(
        self,
        gpu: str,
        window: Window,
        usable: bool,
        state: GpuState | None,
        usage: PodUsageReading | None,
        serving: ServingState | None,
    ) -> tuple[tuple[HolderVerdict, ...], int]:
        """This window's verdicts for the holders of ``gpu`` (none unless two or more hold
        it) and how many holders the cap folded into ``other``."""
        found = None if state is None else holders_of(gpu, state, usage)
        if self.cfg.holders_max_per_gpu <= 0 or found is None or len(found) < 2:
            self.forget(gpu)
            return (), 0
        held, folded = cap(found, self.cfg.holders_max_per_gpu)
        busy = kernel_time(window, usable) or 0.0
        total_weight = sum(h.weight for h in held)
        kernel = {h.holder: busy * h.weight / total_weight if total_weight > 0 else 0.0
                  for h in held}
        sm = window.sm_active if usable else None
        active = self._apportion(gpu, kernel, sm, window.seconds)
        rows = owners(gpu, window.serving or (), serving.targets if serving else (), held)
        memory_total = sum(h.memory_weight for h in held)
        unsplit = mps_unsplit(held)
        out = []
        for h in held:
            if unsplit and h.mps_clients:
                out.append(self._unknown(gpu, h))
                continue
            k = kernel[h.holder]
            a = active.get(h.holder)
            ks, as_ = self._smoothed(gpu, h.holder, k, a, window.seconds)
            share_of_sm = (as_ / sm) if (as_ is not None and sm) else None
            mem_share = (h.memory_weight / memory_total) if memory_total > 0 else share_of_sm
            mine = tuple(m for m in window.serving or () if rows.get(m.model) == h.holder)
            own = _own_window(window, ks, busy, as_, share_of_sm, mem_share, h, mine)
            assessment = assess(own, self.cfg)
            model = self._models.setdefault((gpu, h.holder), GpuModel(self.cfg))
            verdict = model.debounce(assessment)
            out.append(self._verdict(gpu, h, window, k, a, verdict.regime, verdict.hollow_busy,
                                     verdict.busy_no_output, mine))
        live = {h.holder for h in held}
        for key in [key for key in self._totals if key[0] == gpu and key[1] not in live]:
            self._models.pop(key, None)
            self._smooth.pop(key, None)
            del self._totals[key]
        return tuple(out), folded

    def _smoothed(self, gpu: str, holder: Holder, k: float, a: float | None,
                  seconds: float) -> tuple[float, float | None]:
        """Kernel time and SM activity averaged over about SMOOTH_SECONDS (what the regime
        is judged on; the published ratios are the window's own)."""
        key = (gpu, holder)
        before = self._smooth.get(key)
        if before is None:
            self._smooth[key] = (k, a)
            return k, a
        weight = 1.0 - math.exp(-max(seconds, 0.0) / SMOOTH_SECONDS)
        ks = before[0] + weight * (k - before[0])
        as_ = a if (a is None or before[1] is None) else before[1] + weight * (a - before[1])
        self._smooth[key] = (ks, as_)
        return ks, as_

    def _unknown(self, gpu: str, h: HolderInput) -> HolderVerdict:
        """An MPS client whose kernel time NVML gave to the MPS server: its memory is known,
        its share, SM activity and regime are not."""
        self._totals.setdefault((gpu, h.holder), _Totals())
        ns, pod, container, pid = h.holder
        return HolderVerdict(namespace=ns, pod=pod, container=container, pid=pid,
                             processes=h.processes, memory_used_bytes=h.memory_used_bytes,
                             kernel_ratio=None, kernel_seconds=None, regime="unknown")

    def _apportion(
        self, gpu: str, kernel: Mapping[Holder, float], sm: float | None, seconds: float
    ) -> dict[Holder, float]:
        """Each holder's SM activity (share of the window), summing to the GPU's."""
        if sm is None:
            return {}
        unmixer = self._unmixers.setdefault(gpu, Unmixer(self.cfg.holder_memory_seconds))
        fills = unmixer.fills(kernel, sm, seconds)
        raw = {h: kernel[h] * fills[h] for h in kernel}
        total = sum(raw.values())
        busy = sum(kernel.values())
        if total > 0:
            return {h: min(v * sm / total, kernel[h]) for h, v in raw.items()}
        return {h: (sm * kernel[h] / busy if busy > 0 else 0.0) for h in kernel}

    def _verdict(
        self, gpu: str, h: HolderInput, window: Window, k: float, a: float | None,
        regime: str, hollow: bool, no_output: bool, mine: tuple[ModelRates, ...],
    ) -> HolderVerdict:
        totals = self._totals.setdefault((gpu, h.holder), _Totals())
        seconds = window.seconds
        totals.kernel_seconds += k * seconds
        if a is not None:
            totals.sm_active_seconds += a * seconds
        if window.power_watts is not None:
            totals.energy_joules = (totals.energy_joules or 0.0) + window.power_watts * k * seconds
        tokens = sum(m.efficiency_tokens_per_second for m in mine) if mine else None
        per_kernel = None
        if tokens is not None and k >= self.cfg.min_sm_active_for_rate:
            per_kernel = tokens / k
        ns, pod, container, pid = h.holder
        return HolderVerdict(
            namespace=ns,
            pod=pod,
            container=container,
            pid=pid,
            processes=h.processes,
            memory_used_bytes=h.memory_used_bytes,
            kernel_ratio=k,
            kernel_seconds=totals.kernel_seconds,
            sm_active_ratio=a,
            sm_active_seconds=totals.sm_active_seconds if a is not None else None,
            regime=regime,
            hollow_busy=hollow,
            busy_no_output=no_output,
            tokens_per_second=tokens,
            tokens_per_kernel_second=per_kernel,
            energy_joules=totals.energy_joules,
        )

    def gpus(self) -> set[str]:
        return set(self._unmixers) | {gpu for gpu, _ in self._models}

    def forget(self, gpu: str) -> None:
        """A GPU no longer shared (or not read): its holders' memory goes with their series."""
        self._unmixers.pop(gpu, None)
        for key in [key for key in self._models if key[0] == gpu]:
            del self._models[key]
        for key in [key for key in self._totals if key[0] == gpu]:
            del self._totals[key]
        for key in [key for key in self._smooth if key[0] == gpu]:
            del self._smooth[key]


def _own_window(
    gpu: Window, k: float, busy: float, a: float | None, share_of_sm: float | None,
    mem_share: float | None, h: HolderInput, serving: tuple[ModelRates, ...],
) -> Window:
    """The holder's window in its own frame: the time it had (its kernel time plus the time
    nobody ran) stands for the whole window."""
    had = k + max(1.0 - busy, 0.0)
    scale = 1.0 / had if had > 0 else 0.0

    def part(value: float | None, share: float | None) -> float | None:
        if value is None or share is None:
            return None
        return min(value * share * scale, 1.0)

    return replace(
        gpu,
        util=min(k * scale, 1.0),
        graphics_active=min(k * scale, 1.0) if gpu.graphics_active is not None else None,
        sm_active=None if a is None else min(a * scale, 1.0),
        sm_occupancy=part(gpu.sm_occupancy, share_of_sm),
        tensor_active=part(gpu.tensor_active, share_of_sm),
        fp_active=part(gpu.fp_active, share_of_sm),
        dram_active=part(gpu.dram_active, mem_share),
        power_watts=None,
        power_limit_watts=None,
        memory_used_bytes=h.memory_used_bytes,
        processes=max(h.processes, 1),
        serving=serving or None,
        nvlink_bytes_per_second=None,
        link_use=(),
        bus_bytes_per_second=(),
    )


__all__ = ["OTHER", "HolderModel", "Unmixer", "cap", "holders_of", "owners"]
