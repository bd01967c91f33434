"""Turns profiling windows into typed statuses with cumulative totals.

Every backend hands its windows to an integrator, which adds ratio x seconds (and rate x
seconds for link bytes) to per-GPU totals, so ``rate()`` of the published ``_total`` counters
is exact over any range, and numbers each new window so the model can tell it from a repeat.
Backends that hand GPUs to each other in ``auto`` share one integrator: the counters carry
no backend label and must continue, not jump, when the backend changes.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from exporter.readings import ProfilingStatus, ProfilingTotals, ProfilingWindow
from exporter.util import clamp_ratio


def _ratio(value: float | None) -> float | None:
    """0..1 (:func:`~exporter.util.clamp_ratio`), except that GPM's NaN means the counter
    did not move in the window: idle, so 0."""
    return clamp_ratio(0.0 if value is not None and math.isnan(value) else value)


@dataclass
class _Gpu:
    profiled: float = 0.0
    ratios: dict[str, float] = field(default_factory=dict)
    pcie: dict[str, float] = field(default_factory=dict)
    nvlink: dict[str, float] = field(default_factory=dict)
    sequence: int = 0
    totals: ProfilingTotals | None = None


_RATIO_TOTALS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")


class ProfilingIntegrator:
    """Per-GPU totals; thread-safe (backends poll on their own threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gpus: dict[str, _Gpu] = {}

    def window(self, gpu: str, backend: str, window: ProfilingWindow) -> ProfilingStatus:
        """An available status for a new window, with the totals it brings."""
        clean = _clean(window)
        with self._lock:
            state = self._gpus.setdefault(gpu, _Gpu())
            seconds = max(clean.seconds, 0.0)
            state.profiled += seconds
            for name in _RATIO_TOTALS:
                ratio = getattr(clean, name)
                if ratio is not None:
                    state.ratios[name] = state.ratios.get(name, 0.0) + ratio * seconds
            for totals, rates in (
                (state.pcie, clean.pcie_bytes_per_second),
                (state.nvlink, clean.nvlink_bytes_per_second),
            ):
                for direction, rate in rates:
                    totals[direction] = totals.get(direction, 0.0) + rate * seconds
            state.sequence += 1
            state.totals = ProfilingTotals(
                profiled_seconds=state.profiled,
                sm_active_seconds=state.ratios.get("sm_active"),
                sm_occupancy_seconds=state.ratios.get("sm_occupancy"),
                tensor_active_seconds=state.ratios.get("tensor_active"),
                dram_active_seconds=state.ratios.get("dram_active"),
                pcie_bytes=tuple(sorted(state.pcie.items())),
                nvlink_bytes=tuple(sorted(state.nvlink.items())),
            )
            return ProfilingStatus(
                backend, True, window=clean, totals=state.totals, sequence=state.sequence
            )

    def unavailable(self, gpu: str, backend: str, reason: str) -> ProfilingStatus:
        """``backend`` cannot read ``gpu``; the totals so far stay published (a counter must
        not vanish while a backend recovers, or ``rate()`` sees a gap)."""
        with self._lock:
            state = self._gpus.get(gpu)
            totals = state.totals if state else None
            sequence = state.sequence if state else 0
        return ProfilingStatus(backend, False, reason, totals=totals, sequence=sequence)

    def pending(self, gpu: str, backend: str) -> ProfilingStatus:
        """Available, but no window yet (the first sample is the baseline)."""
        with self._lock:
            state = self._gpus.get(gpu)
            totals = state.totals if state else None
            sequence = state.sequence if state else 0
        return ProfilingStatus(backend, True, totals=totals, sequence=sequence)


def _clean(window: ProfilingWindow) -> ProfilingWindow:
    """Ratios clamped to 0..1 and rates to >= 0: never republish what no GPU can do."""
    from dataclasses import replace

    def pairs(values: tuple[tuple[str, float], ...], ratio: bool) -> tuple[tuple[str, float], ...]:
        out = []
        for key, value in values:
            if ratio:
                out.append((key, _ratio(value) or 0.0))
            elif math.isfinite(value):
                out.append((key, max(value, 0.0)))
        return tuple(sorted(out))

    return replace(
        window,
        graphics_active=_ratio(window.graphics_active),
        sm_active=_ratio(window.sm_active),
        sm_occupancy=_ratio(window.sm_occupancy),
        tensor_active=_ratio(window.tensor_active),
        dram_active=_ratio(window.dram_active),
        tensor_pipes=pairs(window.tensor_pipes, True),
        pipes=pairs(window.pipes, True),
        pcie_bytes_per_second=pairs(window.pcie_bytes_per_second, False),
        nvlink_bytes_per_second=pairs(window.nvlink_bytes_per_second, False),
    )
