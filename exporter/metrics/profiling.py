"""Profiling families: the same names, units and labels whichever backend (GPM, DCGM,
dcgm-exporter, or another vendor's that publishes a ``ProfilingReading``) read them, so the
model, dashboards and alerts never care where a ratio came from.
``goodput_gpu_profiling_available`` says which backend that was and, when none works, why.
Like the GPU series (``exporter/metrics/gpu.py``), the ``gpu`` collector owns them, not a
backend's collector."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exporter.metrics.families import Family, GpuFamilies, Row, by_label, counter, gauge
from exporter.metrics.gpu import COLLECTOR
from exporter.readings import ProfilingStatus, ProfilingTotals, ProfilingWindow
from exporter.snapshot import Snapshot


def _window(s: ProfilingStatus) -> ProfilingWindow | None:
    return s.window if s.available else None


def _totals(s: ProfilingStatus) -> ProfilingTotals | None:
    return s.totals


def _selected(snap: Snapshot) -> Mapping[str, ProfilingStatus]:
    out: dict[str, ProfilingStatus] = {}
    for device in snap.inventory:
        status = snap.profiling(device.gpu)
        if status is not None:
            out[device.gpu] = status
    return out


def _all_rows(snap: Snapshot) -> Mapping[str, tuple[ProfilingStatus, ...]]:
    return {d.gpu: snap.profiling_rows(d.gpu) for d in snap.inventory}


def _availability(rows: tuple[ProfilingStatus, ...]) -> Iterable[Row]:
    """One row per backend that spoke: 1 for the one that serves, 0 with its reason for
    the others. Backends that declined a GPU another backend serves are left out."""
    if any(s.available for s in rows):
        return (((s.backend, ""), 1.0) for s in rows if s.available)
    return (((s.backend, s.reason), 0.0) for s in rows)


def _links(rates: tuple[tuple[str, float], ...]) -> Iterable[tuple[str, float]]:
    return ((d, max(v, 0.0)) for d, v in rates)


AVAILABILITY = GpuFamilies[tuple[ProfilingStatus, ...]](
    COLLECTOR,
    _all_rows,
    (
        Family(
            "goodput_gpu_profiling_available",
            "gauge",
            "1 if profiling counters (SM active, tensor, DRAM) are read on this GPU by `source` "
            "(gpm, dcgm, dcgm-exporter); 0 with `reason` if not: unsupported, no_permission, "
            "not_installed, unreachable, not_loaded, locked, incompatible, no_data, gpu_lost, "
            'bad_response, not_found, not_exported, error, or off (source="none").',
            _availability,
            labels=("source", "reason"),
        ),
    ),
)


def _w(attr: str, s: ProfilingStatus) -> float | None:
    w = _window(s)
    value = None if w is None else getattr(w, attr)
    return None if value is None else min(max(float(value), 0.0), 1.0)


def _t(attr: str, s: ProfilingStatus) -> float | None:
    t = s.totals
    return None if t is None else getattr(t, attr)


WINDOW_FAMILIES: tuple[Family[ProfilingStatus], ...] = (
    gauge(
        "goodput_gpu_profiling_window_seconds",
        "Length of the window the last profiling ratios were averaged over.",
        lambda s: None if _window(s) is None else _window(s).seconds,  # type: ignore[union-attr]
        unit="seconds",
        default=False,
    ),
    gauge(
        "goodput_gpu_graphics_active_ratio",
        "Share of the last window the graphics/compute engine had work (GPM GRAPHICS_UTIL, "
        "DCGM GR_ENGINE_ACTIVE).",
        lambda s: _w("graphics_active", s),
        unit="ratio",
        default=False,
    ),
    gauge(
        "goodput_gpu_sm_active_ratio",
        "Share of SMs with at least one warp resident, averaged over the last window "
        "(GPM SM_UTIL, DCGM SM_ACTIVE). Low while utilization is high means hollow busy.",
        lambda s: _w("sm_active", s),
        unit="ratio",
    ),
    gauge(
        "goodput_gpu_sm_occupancy_ratio",
        "Resident warps as a share of the SMs' maximum, averaged over the last window "
        "(the default set has goodput_gpu_sm_occupancy_seconds_total: rate() of it).",
        lambda s: _w("sm_occupancy", s),
        unit="ratio",
        default=False,
    ),
    gauge(
        "goodput_gpu_tensor_active_ratio",
        "Share of cycles any tensor pipe was active over the last window.",
        lambda s: _w("tensor_active", s),
        unit="ratio",
    ),
    by_label(
        "goodput_gpu_tensor_pipe_active_ratio",
        "gauge",
        "Share of cycles one tensor pipe (hmma, imma, dfma, dmma) was active.",
        "pipe",
        lambda s: () if _window(s) is None else _window(s).tensor_pipes,  # type: ignore[union-attr]
        unit="ratio",
        default=False,
    ),
    gauge(
        "goodput_gpu_dram_active_ratio",
        "Device memory bandwidth used as a share of the peak over the last window.",
        lambda s: _w("dram_active", s),
        unit="ratio",
    ),
    by_label(
        "goodput_gpu_pipe_active_ratio",
        "gauge",
        "Share of cycles a non-tensor pipe (fp64, fp32, fp16, integer) was active.",
        "pipe",
        lambda s: () if _window(s) is None else _window(s).pipes,  # type: ignore[union-attr]
        unit="ratio",
        default=False,
    ),
    by_label(
        "goodput_gpu_pcie_bytes_per_second",
        "gauge",
        "PCIe throughput over the last window; direction tx = out of the GPU.",
        "direction",
        lambda s: ()
        if _window(s) is None
        else _links(_window(s).pcie_bytes_per_second),  # type: ignore[union-attr]
        unit="bytes",
        default=False,
    ),
    by_label(
        "goodput_gpu_nvlink_bytes_per_second",
        "gauge",
        "NVLink throughput summed over links over the last window.",
        "direction",
        lambda s: ()
        if _window(s) is None
        else _links(_window(s).nvlink_bytes_per_second),  # type: ignore[union-attr]
        unit="bytes",
        default=False,
    ),
    counter(
        "goodput_gpu_sm_active_seconds_total",
        "SM-active time integrated over windows (ratio x window seconds); rate() gives the "
        "exact average SM active ratio over any range.",
        lambda s: _t("sm_active_seconds", s),
        unit="seconds",
    ),
    counter(
        "goodput_gpu_sm_occupancy_seconds_total",
        "SM occupancy integrated over windows (ratio x window seconds).",
        lambda s: _t("sm_occupancy_seconds", s),
        unit="seconds",
    ),
    counter(
        "goodput_gpu_tensor_active_seconds_total",
        "Tensor-pipe-active time integrated over windows (ratio x window seconds).",
        lambda s: _t("tensor_active_seconds", s),
        unit="seconds",
    ),
    counter(
        "goodput_gpu_dram_active_seconds_total",
        "DRAM-bandwidth-active time integrated over windows (ratio x window seconds).",
        lambda s: _t("dram_active_seconds", s),
        unit="seconds",
    ),
    counter(
        "goodput_gpu_profiled_seconds_total",
        "Seconds covered by profiling windows; divides the other *_seconds_total counters "
        "when windows had gaps.",
        lambda s: _t("profiled_seconds", s),
        unit="seconds",
    ),
    by_label(
        "goodput_gpu_pcie_bytes_total",
        "counter",
        "PCIe bytes integrated from window rates; direction tx = out of the GPU.",
        "direction",
        lambda s: () if s.totals is None else s.totals.pcie_bytes,
        unit="bytes",
    ),
    by_label(
        "goodput_gpu_nvlink_bytes_total",
        "counter",
        "NVLink bytes integrated from window rates.",
        "direction",
        lambda s: () if s.totals is None else s.totals.nvlink_bytes,
        unit="bytes",
    ),
)

FAMILIES = GpuFamilies[ProfilingStatus](COLLECTOR, _selected, WINDOW_FAMILIES)
