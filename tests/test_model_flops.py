"""The peak-FLOPs table matches real NVML device names to the right part."""

from __future__ import annotations

import pytest

from exporter.model.flops import peak_flops

T = 1e12


@pytest.mark.parametrize(
    ("name", "dtype", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4 * T),
        ("NVIDIA H100 80GB HBM3", "fp8", 1978.9 * T),
        ("NVIDIA H100 PCIe", "bf16", 756.0 * T),
        ("NVIDIA H100 NVL", "bf16", 835.5 * T),
        ("NVIDIA H200", "bf16", 989.4 * T),
        ("NVIDIA H200 NVL", "fp16", 835.5 * T),
        ("NVIDIA GH200 480GB", "bf16", 989.4 * T),
        ("NVIDIA A100-SXM4-80GB", "bf16", 312.0 * T),
        ("NVIDIA A100 80GB PCIe", "tf32", 156.0 * T),
        ("NVIDIA L40S", "bf16", 362.05 * T),
        ("NVIDIA L40", "bf16", 181.0 * T),
        ("NVIDIA L4", "fp8", 242.5 * T),
        ("NVIDIA B200", "bf16", 2250.0 * T),
        ("NVIDIA GB200", "bf16", 2500.0 * T),
        ("NVIDIA A100-SXM4-80GB", "fp8", None),  # no FP8 on Ampere
        ("Tesla T4", "bf16", None),  # not in the table: no MFU rather than a guess
    ],
)
def test_table(name: str, dtype: str, expected: float | None) -> None:
    assert peak_flops(name, dtype) == (pytest.approx(expected) if expected else None)


def test_override_wins_and_is_case_insensitive() -> None:
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16", {"h100": {"bf16": 1e15}}) == 1e15
    assert peak_flops("Tesla T4", "fp16", {"T4": {"fp16": 65e12}}) == 65e12


def test_mig_share() -> None:
    full = peak_flops("NVIDIA H100 80GB HBM3", "bf16")
    assert full is not None
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16", mig_profile="3g.40gb") == pytest.approx(
        full * 3 / 7
    )
