"""Peak dense FLOP/s per GPU model and dtype, for MFU.

Values are the vendors' published *dense* (no 2:4 sparsity) tensor-core peaks at boost clock,
in FLOP/s per GPU. Names are matched against the NVML device name, lower-cased, first
pattern wins, so more specific names come before the families that contain them
("gb200" before "b200", "h100 nvl" before "h100"). ``ModelConfig.peak_flops`` entries are
checked first and override this table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

T = 1e12

_H100_SXM = {
    "fp64": 66.9 * T,
    "fp32": 66.9 * T,
    "tf32": 494.7 * T,
    "bf16": 989.4 * T,
    "fp16": 989.4 * T,
    "fp8": 1978.9 * T,
    "int8": 1978.9 * T,
}
_H100_PCIE = {
    "fp64": 51.2 * T,
    "fp32": 51.2 * T,
    "tf32": 378.0 * T,
    "bf16": 756.0 * T,
    "fp16": 756.0 * T,
    "fp8": 1513.0 * T,
    "int8": 1513.0 * T,
}
_H_NVL = {
    "fp64": 60.0 * T,
    "fp32": 60.0 * T,
    "tf32": 417.5 * T,
    "bf16": 835.5 * T,
    "fp16": 835.5 * T,
    "fp8": 1670.5 * T,
    "int8": 1670.5 * T,
}
_B200 = {
    "fp64": 37.0 * T,
    "fp32": 75.0 * T,
    "tf32": 1125.0 * T,
    "bf16": 2250.0 * T,
    "fp16": 2250.0 * T,
    "fp8": 4500.0 * T,
    "int8": 4500.0 * T,
    "fp4": 9000.0 * T,
}
_GB200 = {
    "fp64": 40.0 * T,
    "fp32": 80.0 * T,
    "tf32": 1250.0 * T,
    "bf16": 2500.0 * T,
    "fp16": 2500.0 * T,
    "fp8": 5000.0 * T,
    "int8": 5000.0 * T,
    "fp4": 10000.0 * T,
}
_A100 = {
    "fp64": 19.5 * T,
    "fp32": 19.5 * T,
    "tf32": 156.0 * T,
    "bf16": 312.0 * T,
    "fp16": 312.0 * T,
    "int8": 624.0 * T,
}

PEAK_DENSE_FLOPS: tuple[tuple[str, Mapping[str, float]], ...] = (
    (r"gb200", _GB200),
    (r"b200", _B200),
    (
        r"b100",
        {
            "tf32": 875.0 * T,
            "bf16": 1750.0 * T,
            "fp16": 1750.0 * T,
            "fp8": 3500.0 * T,
            "int8": 3500.0 * T,
            "fp4": 7000.0 * T,
        },
    ),
    (r"gh200", _H100_SXM),
    (r"h200 nvl", _H_NVL),
    (r"h200", _H100_SXM),  # H200 SXM: H100 SXM compute with more, faster HBM
    (r"h100 nvl", _H_NVL),
    (r"h100.*pcie", _H100_PCIE),
    (r"h100|h800", _H100_SXM),
    (
        r"\bh20\b",
        {
            "fp32": 44.0 * T,
            "tf32": 74.0 * T,
            "bf16": 148.0 * T,
            "fp16": 148.0 * T,
            "fp8": 296.0 * T,
            "int8": 296.0 * T,
        },
    ),
    (r"a100|a800", _A100),
    (
        r"l40s",
        {
            "fp32": 91.6 * T,
            "tf32": 183.0 * T,
            "bf16": 362.05 * T,
            "fp16": 362.05 * T,
            "fp8": 733.0 * T,
            "int8": 733.0 * T,
        },
    ),
    (
        r"\bl40\b",
        {
            "fp32": 90.5 * T,
            "tf32": 90.5 * T,
            "bf16": 181.0 * T,
            "fp16": 181.0 * T,
            "fp8": 362.0 * T,
            "int8": 362.0 * T,
        },
    ),
    (
        r"\bl4\b",
        {
            "fp32": 30.3 * T,
            "tf32": 60.0 * T,
            "bf16": 121.0 * T,
            "fp16": 121.0 * T,
            "fp8": 242.5 * T,
            "int8": 242.5 * T,
        },
    ),
    (
        r"\ba10\b",
        {
            "fp32": 31.2 * T,
            "tf32": 62.5 * T,
            "bf16": 125.0 * T,
            "fp16": 125.0 * T,
            "int8": 250.0 * T,
        },
    ),
    (r"v100", {"fp64": 7.8 * T, "fp32": 15.7 * T, "fp16": 125.0 * T}),
)

_MIG_SLICES = re.compile(r"^(\d+)g\.")
FULL_GPU_SLICES = 7
"""Compute slices of a whole A100/H100/H200/B200 in MIG mode (1g = one seventh)."""


def peak_flops(
    gpu_name: str,
    dtype: str,
    overrides: Mapping[str, Mapping[str, float]] | None = None,
    mig_profile: str = "",
) -> float | None:
    """Peak dense FLOP/s of ``gpu_name`` in ``dtype``, or None when unknown.

    A MIG instance gets its share of the SMs: ``<n>g.*`` profiles get n/7 of the peak.
    """
    name = gpu_name.lower()
    dtype = dtype.lower()
    value: float | None = None
    for pattern, table in (overrides or {}).items():
        if pattern.lower() in name and dtype in table:
            value = float(table[dtype])
            break
    if value is None:
        for pattern, table in PEAK_DENSE_FLOPS:
            if re.search(pattern, name):
                value = table.get(dtype)
                break
    if value is None or not value > 0:
        return None
    match = _MIG_SLICES.match(mig_profile.lower())
    if match:
        slices = int(match.group(1))
        value *= min(slices, FULL_GPU_SLICES) / FULL_GPU_SLICES
    return value
