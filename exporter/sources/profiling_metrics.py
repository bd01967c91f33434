"""Profiling signals shared by every profiling source (GPM, DCGM, dcgm-exporter).

Whichever source fills them, the families, units and labels are the same, so the model,
dashboards and alerts never care where a ratio came from. ``goodput_gpu_profiling_available``
says which source that was on each GPU and, when none works, why.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.metrics.catalog import define
from exporter.snapshot import Labels, Sample, labels

SOURCE_LABEL = "profiling"

PROFILING_AVAILABLE = define(
    "goodput_gpu_profiling_available",
    "gauge",
    "1 if profiling counters (SM active, tensor, DRAM) are read on this GPU by `source` (gpm, "
    "dcgm, dcgm-exporter); 0 with `reason` if not: unsupported, no_permission, not_installed, "
    "unreachable, not_loaded, locked, incompatible, no_data, gpu_lost, bad_response, "
    'not_found, not_exported, error, or off (source="none").',
    labels=("source", "reason"),
    source=SOURCE_LABEL,
)
PROFILING_WINDOW = define(
    "goodput_gpu_profiling_window_seconds",
    "gauge",
    "Length of the window the last profiling ratios were averaged over.",
    unit="seconds",
    source=SOURCE_LABEL,
)

GRAPHICS_ACTIVE = define(
    "goodput_gpu_graphics_active_ratio",
    "gauge",
    "Share of the last window the graphics/compute engine had work (GPM GRAPHICS_UTIL, "
    "DCGM GR_ENGINE_ACTIVE).",
    unit="ratio",
    source=SOURCE_LABEL,
)
SM_ACTIVE = define(
    "goodput_gpu_sm_active_ratio",
    "gauge",
    "Share of SMs with at least one warp resident, averaged over the last window "
    "(GPM SM_UTIL, DCGM SM_ACTIVE). Low while utilization is high means hollow busy.",
    unit="ratio",
    source=SOURCE_LABEL,
)
SM_OCCUPANCY = define(
    "goodput_gpu_sm_occupancy_ratio",
    "gauge",
    "Resident warps as a share of the SMs' maximum, averaged over the last window.",
    unit="ratio",
    source=SOURCE_LABEL,
)
TENSOR_ACTIVE = define(
    "goodput_gpu_tensor_active_ratio",
    "gauge",
    "Share of cycles any tensor pipe was active over the last window.",
    unit="ratio",
    source=SOURCE_LABEL,
)
TENSOR_PIPE_ACTIVE = define(
    "goodput_gpu_tensor_pipe_active_ratio",
    "gauge",
    "Share of cycles one tensor pipe (hmma, imma, dfma, dmma) was active.",
    unit="ratio",
    labels=("pipe",),
    source=SOURCE_LABEL,
)
DRAM_ACTIVE = define(
    "goodput_gpu_dram_active_ratio",
    "gauge",
    "Device memory bandwidth used as a share of the peak over the last window.",
    unit="ratio",
    source=SOURCE_LABEL,
)
PIPE_ACTIVE = define(
    "goodput_gpu_pipe_active_ratio",
    "gauge",
    "Share of cycles a non-tensor pipe (fp64, fp32, fp16, integer) was active.",
    unit="ratio",
    labels=("pipe",),
    source=SOURCE_LABEL,
)
SM_ACTIVE_SECONDS = define(
    "goodput_gpu_sm_active_seconds_total",
    "counter",
    "SM-active time integrated over windows (ratio x window seconds); rate() gives the "
    "exact average SM active ratio over any range.",
    unit="seconds",
    source=SOURCE_LABEL,
)
SM_OCCUPANCY_SECONDS = define(
    "goodput_gpu_sm_occupancy_seconds_total",
    "counter",
    "SM occupancy integrated over windows (ratio x window seconds).",
    unit="seconds",
    source=SOURCE_LABEL,
)
TENSOR_ACTIVE_SECONDS = define(
    "goodput_gpu_tensor_active_seconds_total",
    "counter",
    "Tensor-pipe-active time integrated over windows (ratio x window seconds).",
    unit="seconds",
    source=SOURCE_LABEL,
)
DRAM_ACTIVE_SECONDS = define(
    "goodput_gpu_dram_active_seconds_total",
    "counter",
    "DRAM-bandwidth-active time integrated over windows (ratio x window seconds).",
    unit="seconds",
    source=SOURCE_LABEL,
)
PROFILED_SECONDS = define(
    "goodput_gpu_profiled_seconds_total",
    "counter",
    "Seconds covered by profiling windows; divides the other *_seconds_total counters "
    "when windows had gaps.",
    unit="seconds",
    source=SOURCE_LABEL,
)
PCIE_BYTES_RATE = define(
    "goodput_gpu_pcie_bytes_per_second",
    "gauge",
    "PCIe throughput over the last window; direction tx = out of the GPU.",
    unit="bytes",
    labels=("direction",),
    source=SOURCE_LABEL,
)
PCIE_BYTES = define(
    "goodput_gpu_pcie_bytes_total",
    "counter",
    "PCIe bytes integrated from window rates.",
    unit="bytes",
    labels=("direction",),
    source=SOURCE_LABEL,
)
NVLINK_BYTES_RATE = define(
    "goodput_gpu_nvlink_bytes_per_second",
    "gauge",
    "NVLink throughput summed over links over the last window.",
    unit="bytes",
    labels=("direction",),
    source=SOURCE_LABEL,
)
NVLINK_BYTES = define(
    "goodput_gpu_nvlink_bytes_total",
    "counter",
    "NVLink bytes integrated from window rates.",
    unit="bytes",
    labels=("direction",),
    source=SOURCE_LABEL,
)


@dataclass(frozen=True)
class ProfilingWindow:
    """One window of profiling values in base units; None where the source has no value."""

    seconds: float
    graphics_active: float | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    tensor_pipes: tuple[tuple[str, float], ...] = ()
    dram_active: float | None = None
    pipes: tuple[tuple[str, float], ...] = ()
    pcie_bytes_per_second: tuple[tuple[str, float], ...] = ()
    nvlink_bytes_per_second: tuple[tuple[str, float], ...] = ()


class ProfilingIntegrator:
    """Keeps the per-device cumulative counters that turn window ratios into ``_total``s.

    Every profiling source owns one, so switching sources never resets a counter within a
    process lifetime of that source.
    """

    _RATIO_COUNTERS = (
        ("sm_active", SM_ACTIVE_SECONDS),
        ("sm_occupancy", SM_OCCUPANCY_SECONDS),
        ("tensor_active", TENSOR_ACTIVE_SECONDS),
        ("dram_active", DRAM_ACTIVE_SECONDS),
    )

    def __init__(self) -> None:
        self._totals: dict[tuple[str, str, Labels], float] = {}

    def _add(self, gpu: str, name: str, lbl: Labels, amount: float) -> float:
        key = (gpu, name, lbl)
        value = self._totals.get(key, 0.0) + max(amount, 0.0)
        self._totals[key] = value
        return value

    def samples(self, gpu: str, window: ProfilingWindow, source: str) -> list[Sample]:
        """Gauges for this window plus the updated counters, for one device."""
        out = [
            Sample(PROFILING_AVAILABLE, 1.0, labels(source=source, reason="")),
            Sample(PROFILING_WINDOW, window.seconds),
            Sample(PROFILED_SECONDS, self._add(gpu, PROFILED_SECONDS, (), window.seconds)),
        ]
        gauges = (
            (GRAPHICS_ACTIVE, window.graphics_active),
            (SM_ACTIVE, window.sm_active),
            (SM_OCCUPANCY, window.sm_occupancy),
            (TENSOR_ACTIVE, window.tensor_active),
            (DRAM_ACTIVE, window.dram_active),
        )
        for name, ratio in gauges:
            if ratio is not None:
                out.append(Sample(name, clamp_ratio(ratio)))
        for attr, counter in self._RATIO_COUNTERS:
            ratio = getattr(window, attr)
            if ratio is not None:
                total = self._add(gpu, counter, (), clamp_ratio(ratio) * window.seconds)
                out.append(Sample(counter, total))
        for pipe, ratio in window.tensor_pipes:
            out.append(Sample(TENSOR_PIPE_ACTIVE, clamp_ratio(ratio), labels(pipe=pipe)))
        for pipe, ratio in window.pipes:
            out.append(Sample(PIPE_ACTIVE, clamp_ratio(ratio), labels(pipe=pipe)))
        for rate_name, total_name, rates in (
            (PCIE_BYTES_RATE, PCIE_BYTES, window.pcie_bytes_per_second),
            (NVLINK_BYTES_RATE, NVLINK_BYTES, window.nvlink_bytes_per_second),
        ):
            for direction, rate in rates:
                lbl = labels(direction=direction)
                out.append(Sample(rate_name, max(rate, 0.0), lbl))
                total = self._add(gpu, total_name, lbl, rate * window.seconds)
                out.append(Sample(total_name, total, lbl))
        return out

    def totals_only(self, gpu: str) -> list[Sample]:
        """The counters as they stand, for a poll that produced no new window.

        Counters must not vanish between windows, or rate() would see gaps.
        """
        out = []
        for (dev, name, lbl), value in self._totals.items():
            if dev == gpu:
                out.append(Sample(name, value, lbl))
        return out


def unavailable(source: str, reason: str) -> Sample:
    return Sample(PROFILING_AVAILABLE, 0.0, labels(source=source, reason=reason))


def clamp_ratio(value: float) -> float:
    if value != value:  # NaN: the counter did not move in this window
        return 0.0
    return min(max(value, 0.0), 1.0)
