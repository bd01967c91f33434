"""The one-GPU probe of issue 46 (docs/validation/nccl-ras-h200.md): GEMMs after a spacer
kernel ramp up hollow, and NCCL does not count a one-rank communicator's collectives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.model.config import ModelConfig

RAW = Path(__file__).parent.parent / "docs" / "validation" / "raw"
PROBE = json.loads((RAW / "ramp-probe-h200.json").read_text())
PHASES = {p["name"]: p for p in PROBE["phases"]}


def extra_hollow_per_spacer(n: int) -> float:
    """Seconds of GEMM hollow time a spacer adds: (graphics - SM active) per step, less the
    spacer's own time, against the same GEMMs back to back."""
    alone, spaced = PHASES[f"gemm_{n}"], PHASES[f"spaced_{n}"]
    spacer = PHASES["spacers"]["kernel_s"]
    before = (alone["graphics_active"] - alone["sm_active"]) / alone["steps_per_second"]
    after = (spaced["graphics_active"] - spaced["sm_active"]) / spaced["steps_per_second"]
    return after - spacer - before


@pytest.mark.parametrize(("n", "low", "high"), [
    (2048, 0.0, 1.5e-6), (3072, 2e-6, 3.5e-6), (4096, 4.5e-6, 6.5e-6), (8192, 5e-6, 7e-6)])
def test_a_gemm_after_another_kernel_is_hollower(n: int, low: float, high: float) -> None:
    assert low <= extra_hollow_per_spacer(n) <= high


def test_the_models_ramp_is_above_a_one_thread_spinners() -> None:
    """8 us per NCCL collective (fitted on decode steps) against 3-6 us after a spinner that
    holds one thread: a collective's kernel leaves more to refill, never less."""
    ramp = ModelConfig().collective_ramp_seconds
    assert max(extra_hollow_per_spacer(n) for n in (3072, 4096, 8192)) < ramp


def test_tensor_activity_per_sm_active_second_is_unchanged_by_the_spacers() -> None:
    for n in (4096, 8192):
        alone, spaced = PHASES[f"gemm_{n}"], PHASES[f"spaced_{n}"]
        assert alone["tensor_active"] / alone["sm_active"] == pytest.approx(
            spaced["tensor_active"] / spaced["sm_active"], abs=0.005)


def test_nccl_counts_no_collective_of_a_one_rank_communicator() -> None:
    probe = json.loads((RAW / "nccl-ras-probe-1gpu-h200.json").read_text())
    launched = [r["counts"][-1][1] for r in probe["ranks"]]
    assert min(launched) > 200_000
    answered = [s for s in probe["samples"] if s["answered"]]
    assert answered and max(s["communicators"] for s in answered) == 2
    assert all(total == 0 for s in answered for total, _rate in s["gpus"].values())
