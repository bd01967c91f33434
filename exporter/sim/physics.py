"""Deterministic GPU physics for the simulated node.

A workload pattern gives the instantaneous activity of a GPU at time ``t``; :class:`GpuPhysics`
integrates it in fixed steps so that everything cumulative (energy, GPM counters, throttle
time) is the exact integral of what the instantaneous readings show. Power follows activity,
energy integrates power, clocks drop and temperature rises under throttling.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields

STEP_SECONDS = 0.05

THROTTLE_HW_THERMAL = 0x40
THROTTLE_SW_THERMAL = 0x20
THROTTLE_IDLE = 0x1


@dataclass(frozen=True)
class Activity:
    """Instantaneous activity, ratios 0..1 (what the GPU's counters see right now)."""

    util: float = 0.0  # a kernel is resident (kernel-time utilization)
    mem_util: float = 0.0
    graphics: float = 0.0
    sm_active: float = 0.0
    sm_occupancy: float = 0.0
    tensor: float = 0.0
    hmma: float = 0.0
    imma: float = 0.0
    dfma: float = 0.0
    dmma: float = 0.0
    dram: float = 0.0
    fp64: float = 0.0
    fp32: float = 0.0
    fp16: float = 0.0
    integer: float = 0.0
    pcie_tx_mib: float = 0.0  # MiB/s, as GPM reports
    pcie_rx_mib: float = 0.0
    nvlink_tx_mib: float = 0.0
    nvlink_rx_mib: float = 0.0
    memory_used_bytes: int = 512 * 1024**2
    throttle_mask: int = 0


RATIO_FIELDS = tuple(
    f.name for f in fields(Activity) if f.name not in ("memory_used_bytes", "throttle_mask")
)

Pattern = Callable[[float], Activity]


@dataclass
class GpuSpec:
    """Static properties of the simulated part (numbers of an H100 SXM 80 GB)."""

    name: str = "NVIDIA H100 80GB HBM3"
    memory_total_bytes: int = 80 * 1024**3
    idle_watts: float = 70.0
    max_watts: float = 700.0
    power_limit_watts: float = 700.0
    max_sm_mhz: int = 1980
    mem_mhz: int = 2619
    ambient_celsius: float = 32.0


@dataclass
class Integrals:
    """Running integrals since the simulated driver loaded."""

    t: float = 0.0
    energy_mj: float = 0.0
    ratios: dict[str, float] = field(default_factory=lambda: dict.fromkeys(RATIO_FIELDS, 0.0))
    throttle_ns: dict[int, float] = field(default_factory=dict)


class GpuPhysics:
    """Integrates one pattern forward in time, lazily, as it is observed."""

    def __init__(self, pattern: Pattern, spec: GpuSpec | None = None, start: float = 0.0) -> None:
        self.pattern = pattern
        self.spec = spec or GpuSpec()
        self.integrals = Integrals(t=start)
        self._start = start
        self._temp = self._target_temp(pattern(0.0))  # start warm: a node already running

    def activity(self, now: float) -> Activity:
        self.advance(now)
        return self.pattern(now - self._start)

    def mean(self, now: float, period: float, name: str, points: int = 20) -> float:
        """Average of one ratio over the last ``period`` seconds, as NVML's utilization
        reports the share of its last sample period rather than an instant."""
        total = 0.0
        for i in range(points):
            t = now - period * (i + 0.5) / points
            total += getattr(self.pattern(t - self._start), name)
        return total / points

    def advance(self, now: float) -> None:
        acc = self.integrals
        while acc.t < now:
            dt = min(STEP_SECONDS, now - acc.t)
            act = self.pattern(acc.t - self._start)
            acc.energy_mj += self.power_watts(act) * dt * 1000.0
            ratios, now_ = acc.ratios, act.__dict__
            for name in RATIO_FIELDS:
                ratios[name] += now_[name] * dt
            for bit in (THROTTLE_HW_THERMAL, THROTTLE_SW_THERMAL):
                if act.throttle_mask & bit:
                    acc.throttle_ns[bit] = acc.throttle_ns.get(bit, 0.0) + dt * 1e9
            self._temp += (self._target_temp(act) - self._temp) * min(dt / 20.0, 1.0)
            acc.t += dt

    def power_watts(self, act: Activity) -> float:
        """Board power: idle floor plus what the busy SMs, tensor cores and HBM draw."""
        s = self.spec
        load = 0.10 * act.util + 0.35 * act.sm_active + 0.35 * act.tensor + 0.20 * act.dram
        if act.throttle_mask & THROTTLE_HW_THERMAL:
            load *= 0.75
        return s.idle_watts + (s.max_watts - s.idle_watts) * min(load, 1.0)

    def temperature(self, now: float) -> float:
        self.advance(now)
        return self._temp

    def _target_temp(self, act: Activity) -> float:
        extra = 0.0
        if act.throttle_mask & THROTTLE_HW_THERMAL:
            extra = 25.0  # a blocked air path: hotter than the power alone explains
        return self.spec.ambient_celsius + 0.075 * self.power_watts(act) + extra

    def sm_clock_mhz(self, act: Activity) -> int:
        if act.throttle_mask & THROTTLE_HW_THERMAL:
            return int(self.spec.max_sm_mhz * 0.62)
        if act.util == 0.0:
            return 345  # idle clocks
        return self.spec.max_sm_mhz


def wiggle(t: float, seed: int, amount: float = 0.03) -> float:
    """A deterministic, bounded variation so lines are not perfectly flat."""
    return 1.0 + amount * math.sin(t / 7.0 + seed * 1.7) * math.cos(t / 13.0 + seed)


_CLAMPED = tuple(name for name in RATIO_FIELDS if not name.endswith("_mib"))
_BANDWIDTHS = tuple(name for name in RATIO_FIELDS if name.endswith("_mib"))


def scaled(act: Activity, factor: float) -> Activity:
    """Scale every ratio by ``factor``, clamped to [0, 1] (bandwidths are not clamped).

    The simulator's hot path (about a million calls per virtual hour of a node, which the
    fleet tests record): built field by field into a fresh instance rather than through
    ``dataclasses.replace`` and ``min``/``max``, which made it 2.5x slower; the values are
    bit for bit the same (``1.0 if x > 1.0 else 0.0 if x < 0.0 else x`` is
    ``min(max(x, 0.0), 1.0)``, NaN and -0.0 included)."""
    values = dict(act.__dict__)
    for name in _CLAMPED:
        x = values[name] * factor
        values[name] = 1.0 if x > 1.0 else (0.0 if x < 0.0 else x)
    for name in _BANDWIDTHS:
        values[name] *= factor
    out = object.__new__(Activity)  # frozen: no __setattr__, so fill its __dict__ directly
    out.__dict__.update(values)
    return out
