"""llama.cpp's generated tokens: a live estimate that settles on the engine's exact count.

The estimate (decode calls x busy slots per call, plus accepted draft tokens) moves while
requests run; ``tokens_predicted_total`` is exact but moves only when a request ends. The
:class:`Settler` publishes the larger of the two while busy and the exact count when idle,
never going down (an overshoot is held until the exact count passes it).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from exporter.sources.serving.adapter import Reading, Settler
from exporter.sources.serving.scrape import interpret

FIXTURES = Path(__file__).parent / "fixtures"
KEY = ("generation_tokens", "", "")


def llamacpp(
    n_decode: float,
    busy: float,
    predicted: float,
    processing: int,
    accepted: float | None = None,
) -> str:
    text = (
        "# TYPE llamacpp:tokens_predicted_total counter\n"
        f"llamacpp:tokens_predicted_total {predicted:g}\n"
        "# TYPE llamacpp:n_decode_total counter\n"
        f"llamacpp:n_decode_total {n_decode:g}\n"
        "# TYPE llamacpp:requests_processing gauge\n"
        f"llamacpp:requests_processing {processing}\n"
        "# TYPE llamacpp:n_busy_slots_per_decode gauge\n"
        f"llamacpp:n_busy_slots_per_decode {busy:g}\n"
    )
    if accepted is not None:
        text += (
            "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter\n"
            f"llamacpp:spec_decode_num_accepted_tokens_total {accepted:g}\n"
        )
    return text


def published(settler: Settler, text: str, started: str = "") -> float:
    reading = interpret(text)
    if started:
        reading = replace(reading, started=started)
    return settler.apply(reading).values[KEY]


def test_real_spec_capture_reads_exact_when_idle() -> None:
    """The real capture: 11 decode calls x 2.54545 busy slots + 172 accepted = 200."""
    reading = interpret((FIXTURES / "llamacpp_spec.txt").read_text())
    assert reading.values[KEY] == 200.0
    assert reading.settle[KEY] == (200.0, True)
    assert Settler().apply(reading).values[KEY] == 200.0


def test_accepted_draft_tokens_are_added_to_the_live_estimate() -> None:
    reading = interpret(llamacpp(49, 1.959, 800, 2, accepted=704))
    assert reading.values[KEY] == round(49 * 1.959) + 704
    assert reading.live["generation_tokens"] is True


def test_busy_publishes_the_larger_then_idle_settles_on_the_exact_count() -> None:
    settler = Settler()
    # Busy, no spec counters: the estimate lags far behind what finished requests show.
    assert published(settler, llamacpp(100, 1.5, 300, 2)) == 300.0
    assert published(settler, llamacpp(400, 1.5, 300, 2)) == 600.0
    # Idle: the exact count, which is above the estimate.
    assert published(settler, llamacpp(500, 1.5, 1406, 0)) == 1406.0


def test_an_overshoot_is_held_until_the_exact_count_passes_it() -> None:
    settler = Settler()
    assert published(settler, llamacpp(100, 2, 150, 2)) == 200.0  # estimate over
    assert published(settler, llamacpp(100, 2, 190, 0)) == 200.0  # idle: held, not 190
    assert published(settler, llamacpp(100, 2, 195, 0)) == 200.0
    assert published(settler, llamacpp(110, 2, 230, 0)) == 230.0  # passed: exact again
    assert published(settler, llamacpp(120, 2, 240, 1)) == 240.0


def test_a_new_process_starts_afresh() -> None:
    settler = Settler()
    assert published(settler, llamacpp(100, 2, 150, 2), "a") == 200.0
    assert published(settler, llamacpp(100, 2, 190, 0), "a") == 200.0  # held
    # The exact count fell: a new process; its own count, and the drop shows the restart.
    assert published(settler, llamacpp(5, 1, 10, 0), "b") == 10.0
    assert published(settler, llamacpp(30, 1, 30, 0), "b") == 30.0


def test_a_changed_start_token_alone_keeps_holding() -> None:
    """Publishing less on a new token would make a flapping token look like a restart
    (the accumulator counts a restart's whole value again)."""
    settler = Settler()
    assert published(settler, llamacpp(100, 2, 150, 2), "a") == 200.0
    assert published(settler, llamacpp(100, 2, 190, 0), "b") == 200.0
    assert published(settler, llamacpp(100, 2, 195, 0)) == 200.0
    assert published(settler, llamacpp(110, 2, 210, 0), "c") == 210.0


def test_rounding_dips_of_the_estimate_are_not_a_restart() -> None:
    settler = Settler()
    first = published(settler, llamacpp(1.20003e6, 2.54167, 3e6, 3))
    assert first == round(1.20003e6 * 2.54167)
    # The average printed one digit lower: the estimate dips, the total holds.
    assert published(settler, llamacpp(1.20003e6, 2.54166, 3e6, 3)) == first
    assert interpret(llamacpp(1.20003e6, 2.54166, 3e6, 3)).values[KEY] < first


def test_without_an_idle_gauge_the_estimate_never_settles_down() -> None:
    text = llamacpp(100, 2, 150, 0).replace("llamacpp:requests_processing", "x_processing")
    reading = interpret(text)
    assert reading.settle[KEY] == (150.0, False)
    assert Settler().apply(reading).values[KEY] == 200.0


def test_bad_accepted_count_drops_the_value_this_scrape() -> None:
    reading = interpret(llamacpp(100, 2, 150, 1, accepted=float("nan")))
    assert KEY not in reading.values
    assert reading.dropped == {"non_finite": 1}
    assert Settler().apply(reading).values.get(KEY) is None


def test_readings_without_settle_pass_through() -> None:
    reading = interpret((FIXTURES / "vllm_v1.txt").read_text())
    assert isinstance(reading, Reading) and not reading.settle
    assert Settler().apply(reading) is reading
