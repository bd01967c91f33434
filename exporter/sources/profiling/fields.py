"""Profiling field tables: DCGM (DCP) field ids with both vocabularies of names (shared by the
DCGM and dcgm-exporter backends), and NVML GPM metric ids; each maps onto a field of
:class:`~exporter.readings.ProfilingWindow`.

DCGM 4.6 renamed the Python/C names (``DCGM_FI_PROF_SM_ACTIVE`` became
``DCGM_FI_PROF_SM_UTIL_RATIO``) but kept the numbers, so code addresses fields by number and
only the dcgm-exporter source, which sees names, needs both spellings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exporter.readings import ProfilingWindow

# field id -> (ProfilingWindow attribute, pipe/direction label); ratios are 0-1 in DCGM.
RATIO_FIELDS: dict[int, tuple[str, str]] = {
    1001: ("graphics_active", ""),
    1002: ("sm_active", ""),
    1003: ("sm_occupancy", ""),
    1004: ("tensor_active", ""),
    1005: ("dram_active", ""),
    1006: ("pipes", "fp64"),
    1007: ("pipes", "fp32"),
    1008: ("pipes", "fp16"),
    1013: ("tensor_pipes", "imma"),
    1014: ("tensor_pipes", "hmma"),
    1015: ("tensor_pipes", "dfma"),
    1016: ("pipes", "integer"),
}
# field id -> attribute, direction; bytes per second (tx = out of the GPU).
RATE_FIELDS: dict[int, tuple[str, str]] = {
    1009: ("pcie_bytes_per_second", "tx"),
    1010: ("pcie_bytes_per_second", "rx"),
    1011: ("nvlink_bytes_per_second", "tx"),
    1012: ("nvlink_bytes_per_second", "rx"),
}
SM_ACTIVE_FIELD = 1002

# Monotonic counters (DCGM >= 4.6, served from GPM); deltas give exact ratios over any gap.
SM_CYCLES_ELAPSED_TOTAL = 1084
SM_CYCLES_ACTIVE_TOTAL = 1085
MMA_CYCLES_ACTIVE_TOTAL = 1086
PCIE_TX_BYTES_TOTAL = 1091
PCIE_RX_BYTES_TOTAL = 1092
CUMULATIVE_FIELDS = (
    SM_CYCLES_ELAPSED_TOTAL,
    SM_CYCLES_ACTIVE_TOTAL,
    MMA_CYCLES_ACTIVE_TOTAL,
    PCIE_TX_BYTES_TOTAL,
    PCIE_RX_BYTES_TOTAL,
)

# Names as dcgm-exporter prints them: <= 4.8 (DCGM <= 4.5 names) and >= 4.9 (DCGM 4.6+ names).
NAMES: dict[str, int] = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 1001,
    "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO": 1001,
    "DCGM_FI_PROF_SM_ACTIVE": 1002,
    "DCGM_FI_PROF_SM_UTIL_RATIO": 1002,
    "DCGM_FI_PROF_SM_OCCUPANCY": 1003,
    "DCGM_FI_PROF_SM_OCCUPANCY_RATIO": 1003,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 1004,
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO": 1004,
    "DCGM_FI_PROF_DRAM_ACTIVE": 1005,
    "DCGM_FI_PROF_DRAM_UTIL_RATIO": 1005,
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 1006,
    "DCGM_FI_PROF_FP64_UTIL_RATIO": 1006,
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": 1007,
    "DCGM_FI_PROF_FP32_UTIL_RATIO": 1007,
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": 1008,
    "DCGM_FI_PROF_FP16_UTIL_RATIO": 1008,
    "DCGM_FI_PROF_PCIE_TX_BYTES": 1009,
    "DCGM_FI_PROF_PCIE_RX_BYTES": 1010,
    "DCGM_FI_PROF_NVLINK_TX_BYTES": 1011,
    "DCGM_FI_PROF_NVLINK_RX_BYTES": 1012,
    "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE": 1013,
    "DCGM_FI_PROF_IMMA_UTIL_RATIO": 1013,
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": 1014,
    "DCGM_FI_PROF_HMMA_UTIL_RATIO": 1014,
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE": 1015,
    "DCGM_FI_PROF_DFMA_UTIL_RATIO": 1015,
    "DCGM_FI_PROF_PIPE_INT_ACTIVE": 1016,
    "DCGM_FI_PROF_INT_UTIL_RATIO": 1016,
}


def build_window(seconds: float, values: Mapping[int, float]) -> ProfilingWindow:
    """A window from DCP values keyed by field id (ratios 0-1, rates in bytes per second)."""
    named = (
        (*(RATIO_FIELDS.get(field_id) or RATE_FIELDS[field_id]), value)
        for field_id, value in values.items()
        if field_id in RATIO_FIELDS or field_id in RATE_FIELDS
    )
    return window_of(seconds, named)


def window_of(seconds: float, named: Iterable[tuple[str, str, float]]) -> ProfilingWindow:
    """A window from (attribute, label, value) triples: a label puts the value in that
    attribute's per-pipe or per-direction tuple, no label sets the attribute itself. The one
    assembly of a window, whichever backend's ids the values came under."""
    scalars: dict[str, float] = {}
    groups: dict[str, list[tuple[str, float]]] = {
        "tensor_pipes": [],
        "pipes": [],
        "pcie_bytes_per_second": [],
        "nvlink_bytes_per_second": [],
    }
    for attr, label, value in named:
        if label:
            groups[attr].append((label, value))
        else:
            scalars[attr] = value
    return ProfilingWindow(
        seconds=seconds,
        graphics_active=scalars.get("graphics_active"),
        sm_active=scalars.get("sm_active"),
        sm_occupancy=scalars.get("sm_occupancy"),
        tensor_active=scalars.get("tensor_active"),
        dram_active=scalars.get("dram_active"),
        tensor_pipes=tuple(sorted(groups["tensor_pipes"])),
        pipes=tuple(sorted(groups["pipes"])),
        pcie_bytes_per_second=tuple(sorted(groups["pcie_bytes_per_second"])),
        nvlink_bytes_per_second=tuple(sorted(groups["nvlink_bytes_per_second"])),
    )


def normalise_uuid(uuid: str) -> str:
    """``GPU-ABC...`` and ``abc...`` compare equal (DCGM and NVML spell UUIDs alike, but
    exporters and older DCGM versions have dropped the prefix)."""
    text = uuid.strip().lower()
    return text.removeprefix("gpu-")


# NVML GPM metric ids (NVML_GPM_METRIC_*), stable across bindings versions; addressed by
# number so older nvidia-ml-py releases that lack a constant still work. Each maps to the
# ProfilingWindow field it fills (and the pipe or direction label within it).
MIB = 1024.0 * 1024.0
PERCENT_IDS: dict[int, tuple[str, str]] = {
    1: ("graphics_active", ""),
    2: ("sm_active", ""),
    3: ("sm_occupancy", ""),
    4: ("pipes", "integer"),
    5: ("tensor_active", ""),
    6: ("tensor_pipes", "dfma"),
    7: ("tensor_pipes", "hmma"),
    8: ("tensor_pipes", "dmma"),
    9: ("tensor_pipes", "imma"),
    10: ("dram_active", ""),
    11: ("pipes", "fp64"),
    12: ("pipes", "fp32"),
    13: ("pipes", "fp16"),
}
"""GPM ids reported in percent."""
BANDWIDTH_IDS: dict[int, tuple[str, str]] = {
    20: ("pcie_bytes_per_second", "tx"),
    21: ("pcie_bytes_per_second", "rx"),
    60: ("nvlink_bytes_per_second", "rx"),
    61: ("nvlink_bytes_per_second", "tx"),
}
"""GPM ids reported in MiB/s."""
WANTED_IDS = (*PERCENT_IDS, *BANDWIDTH_IDS)


def gpm_window(seconds: float, values: Mapping[int, float]) -> ProfilingWindow:
    """A window from GPM metric values keyed by metric id (percentages, MiB per second); a
    NaN (nothing moved in the window) reads as 0."""

    def scaled(metric_id: int, value: float) -> tuple[str, str, float]:
        if metric_id in PERCENT_IDS:
            attr, label = PERCENT_IDS[metric_id]
            ratio = value / 100.0
        else:
            attr, label = BANDWIDTH_IDS[metric_id]
            ratio = value * MIB
        return attr, label, 0.0 if ratio != ratio else ratio

    return window_of(seconds, (scaled(i, v) for i, v in values.items()))
