"""Property tests: the model's outputs stay in range and finite for any input."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.model.config import ModelConfig
from exporter.model.core import REGIMES, GpuModel, ModelRates, Window, assess
from exporter.model.flops import PEAK_DENSE_FLOPS, peak_flops
from tests.support.typed import evaluate

CFG = ModelConfig(model_parameters={"m": 7e9, "zero": 0.0})

# Any float, including NaN, infinities, negatives and values above 1: bad input must not leak.
wild = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1.0, 0.5])
)
ratio = st.one_of(st.none(), st.floats(0.0, 1.0))
rates = st.builds(
    ModelRates,
    model=st.sampled_from(["m", "zero", "other"]),
    tokens_per_second=st.floats(0.0, 1e7),
    efficiency_tokens_per_second=st.floats(0.0, 1e7),
    flops_per_second=st.one_of(st.none(), st.floats(0.0, 1e18)),
    requests_running=st.floats(0.0, 1e4),
    requests_waiting=st.floats(0.0, 1e4),
)
windows = st.builds(
    Window,
    seconds=wild,
    util=wild,
    sm_active=wild,
    sm_occupancy=wild,
    tensor_active=wild,
    dram_active=wild,
    fp_active=wild,
    graphics_active=wild,
    profiling_available=st.booleans(),
    profiling_age_seconds=wild,
    power_watts=wild,
    power_limit_watts=wild,
    memory_used_bytes=wild,
    memory_total_bytes=wild,
    processes=st.one_of(st.none(), st.integers(0, 100)),
    serving=st.one_of(st.none(), st.lists(rates, max_size=3).map(tuple)),
    gpu_name=st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla T4", ""]),
    mig_profile=st.sampled_from(["", "1g.10gb", "3g.40gb", "junk"]),
)


def finite_or_none(value: float | None) -> bool:
    return value is None or math.isfinite(value)


@settings(max_examples=400, deadline=None)
@given(windows)
def test_every_output_finite_and_ratios_in_range(w: Window) -> None:
    a = assess(w, CFG)
    assert a.regime in REGIMES
    for value in (a.hollow_utilization, a.efficiency_score, a.mfu):
        assert value is None or 0.0 <= value <= 1.0
    for value in (a.tokens_per_sm_second, a.joules_per_token):
        assert finite_or_none(value)
        assert value is None or value >= 0.0
    if a.regime == "unknown":
        assert not a.hollow_busy


@settings(max_examples=300, deadline=None)
@given(windows, st.floats(0.0, 1e6), st.floats(0.0, 1e6))
def test_more_tokens_never_lower_the_score(w: Window, low: float, extra: float) -> None:
    fewer = Window(**{**w.__dict__, "serving": (ModelRates("m", low, low),)})
    more = Window(**{**w.__dict__, "serving": (ModelRates("m", low + extra, low + extra),)})
    a, b = assess(fewer, CFG), assess(more, CFG)
    if a.efficiency_score is not None:
        assert b.efficiency_score is not None
        assert b.efficiency_score >= a.efficiency_score


@settings(max_examples=100, deadline=None)
@given(st.lists(windows, min_size=1, max_size=12))
def test_debounced_verdict_always_one_regime(ws: list[Window]) -> None:
    model = GpuModel(CFG)
    for w in ws:
        v = evaluate(model, w)
        assert v.regime in REGIMES
        if v.window.regime == "unknown" and not v.window.busy_no_output:
            assert not v.busy_unproductive


@given(st.sampled_from([p for p, _ in PEAK_DENSE_FLOPS]), st.text(max_size=8))
def test_peak_lookup_never_zero_or_negative(_: str, dtype: str) -> None:
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA B200", "x"):
        value = peak_flops(name, dtype)
        assert value is None or (math.isfinite(value) and value > 0)
