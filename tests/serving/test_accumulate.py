"""Properties of the serving accumulator, for any sequence of scrapes a hostile or broken
engine can produce: resets, restarts, a start time that flaps, NaN/+-Inf/negative values,
huge jumps, model names that churn or run long, the same series twice.

Scrape bodies go through the real parser and vLLM alias table (``scrape.interpret``), then
the per-target :class:`Ledger` and the shared :class:`Published` totals, as the source
wires them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.sources.serving.accumulate import (
    FIRST_READING_SECONDS,
    SLACK_SECONDS,
    DeltaTracker,
    Ledger,
    Limits,
    Published,
)
from exporter.sources.serving.scrape import interpret

LIMITS = Limits(max_models=3, max_label_length=20, stale_after=30.0, tokens_per_second=1e4)
MODELS = ["m", "n", "o", "p", "q", "a-very-long-model-name-that-is-cut", ""]
KINDS = {"generation_tokens": "tokens/generation", "prompt_tokens": "tokens/prompt"}
FAMILIES = {"generation_tokens": "vllm:generation_tokens_total",
            "prompt_tokens": "vllm:prompt_tokens_total"}

values = st.one_of(
    st.integers(min_value=0, max_value=10**6).map(float),  # ordinary counts, resets
    st.floats(min_value=-1e308, max_value=1e308),  # negative, huge
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, 1e18, 0.0]),
)


@dataclass(frozen=True)
class Scrape:
    dt: float
    ok: bool
    started: str
    rows: tuple[tuple[str, str, float], ...]
    """(signal, model, value); a (signal, model) listed twice is a duplicate series."""


scrapes = st.builds(
    Scrape,
    dt=st.floats(min_value=0.0, max_value=60.0),
    ok=st.booleans(),
    started=st.sampled_from(["", "1700000000", "1700000060", "1700000120"]),
    rows=st.lists(
        st.tuples(st.sampled_from(sorted(KINDS)), st.sampled_from(MODELS), values), max_size=6
    ).map(tuple),
)


def number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def body(scrape: Scrape) -> str:
    lines = [f"# TYPE {FAMILIES[k].removesuffix('_total')} counter" for k in sorted(KINDS)]
    for signal, model, value in scrape.rows:
        lines.append(f'{FAMILIES[signal]}{{model_name="{model}"}} {number(value)}')
    if scrape.started:
        lines += ["# TYPE process_start_time_seconds gauge",
                  f"process_start_time_seconds {scrape.started}"]
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(scrapes, max_size=25), st.integers(min_value=1, max_value=4))
def test_published_counters_are_monotonic_finite_bounded_and_exact(
    sequence: list[Scrape], gpus: int
) -> None:
    ledger, published = Ledger(LIMITS), Published()
    accepted: dict[tuple[str, str, str], float] = {}
    before: dict[tuple[str, str, str], float] = {}
    now, last_reading = 0.0, None
    for scrape in sequence:
        now += scrape.dt
        if not scrape.ok:
            ledger.failed()
        else:
            reading = interpret(body(scrape), "vllm")
            ledger.count(reading.dropped)
            relabelled = ledger.relabel(reading.values, "", now)
            step = ledger.step(relabelled, counters=KINDS, now=now, gpus=lambda _k: gpus,
                               started=reading.started)
            for key, delta in step.deltas.items():
                for gpu in range(gpus):
                    row = (str(gpu), key[1], "vllm")
                    published.add(row, KINDS[key[0]], delta / gpus, "t", now)
                    field_key = (str(gpu), key[1], KINDS[key[0]])
                    accepted[field_key] = accepted.get(field_key, 0.0) + delta / gpus
            elapsed = FIRST_READING_SECONDS if last_reading is None else now - last_reading
            last_reading = now
            ceiling = LIMITS.tokens_per_second * (elapsed + SLACK_SECONDS)
            for (gpu, model, _engine), fields in published.rows().items():
                for name, total in fields.items():
                    key = (gpu, model, name)
                    assert math.isfinite(total) and total >= 0
                    assert total >= before.get(key, 0.0)  # monotonic
                    assert total - before.get(key, 0.0) <= ceiling * (1 + 1e-9)
                    assert math.isclose(total, accepted.get(key, 0.0), rel_tol=1e-9,
                                        abs_tol=1e-6)
                    before[key] = total
            assert len(ledger.models) <= LIMITS.max_models
            assert all(len(m) <= LIMITS.max_label_length for m in ledger.models)
        ledger.expire(now)
        published.expire(now, LIMITS.stale_after)
        alive = {(g, m, n) for (g, m, _), f in published.rows().items() for n in f}
        before = {k: v for k, v in before.items() if k in alive}
        accepted = {k: v for k, v in accepted.items() if k in alive}
    assert all(n >= 0 for n in ledger.dropped.values())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=2, max_size=30))
def test_start_time_flapping_with_counters_that_do_not_go_down_adds_nothing(
    raw: list[int],
) -> None:
    ledger = Ledger(LIMITS)
    value, total = 0.0, 0.0
    for i, bump in enumerate(raw):
        value = max(value, float(bump))
        body_text = (f"# TYPE vllm:generation_tokens_total counter\n"
                     f'vllm:generation_tokens_total{{model_name="m"}} {value}\n'
                     f"# TYPE process_start_time_seconds gauge\n"
                     f"process_start_time_seconds {1.7e9 + i}\n")
        reading = interpret(body_text, "vllm")
        step = ledger.step(ledger.relabel(reading.values, "", float(i)), counters=KINDS,
                           now=float(i) * 1000, gpus=lambda _k: 1, started=reading.started)
        total += sum(step.deltas.values())
        assert not step.restarted
    assert total == value  # exactly the growth, never the whole value again


def test_reset_adds_the_new_value() -> None:
    tracker = DeltaTracker()
    assert [tracker.delta("k", v) for v in (10, 15, 3, 4)] == [10, 5, 3, 1]
    tracker.forget_where(lambda key: key == "k")
    assert tracker.delta("k", 7) == 7


def test_a_row_fed_by_two_targets_stays_until_both_are_gone() -> None:
    published = Published()
    published.add(("0", "m", "vllm"), "tokens/generation", 5.0, "a", 0.0)
    published.add(("0", "m", "vllm"), "tokens/generation", 7.0, "b", 0.0)
    published.release("a")
    assert published.rows()[("0", "m", "vllm")]["tokens/generation"] == 12.0
    published.expire(100.0, 30.0)
    assert published.rows() == {}


def test_engine_series_per_target_are_bounded_and_counted() -> None:
    ledger = Ledger(Limits(max_models=1))
    values = {("generation_tokens", "m", f"GPU-{i}"): 1.0 for i in range(200)}
    step = ledger.step(values, counters=KINDS, now=0.0, gpus=lambda _k: 1)
    assert len(step.deltas) == 128
    assert ledger.dropped["max_series"] == 72
