"""Every public capture in tests/fixtures/serving-metrics is recognised and read.

Those files are public data copied unchanged into the repository; their README names where
each one came from. A missing file is a failure, never a skip.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.sources.serving.exposition import ExpositionError, parse
from exporter.sources.serving.scrape import interpret

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "serving-metrics"

# file -> (engine, a signal that must be read, or "" for files that carry none we use)
EXPECTED = {
    "nim-llm-1.x-datadog-fixture.txt": ("nim", "generation_tokens"),
    "ray-serve-2.32-vllm-datadog-fixture-TRUNCATED.txt": ("ray-vllm", "generation_tokens"),
    "sglang-0.3.5-pr1853-first-metrics-FRAGMENT.txt": ("sglang", "prompt_tokens"),
    "sglang-0.3.x-docs-production_metrics.txt": ("sglang", "generation_tokens"),
    "sglang-0.4.x-dp8-aibrix-issue1614-FRAGMENT.txt": ("sglang", "requests_waiting"),
    "sglang-0.5.10-datadog-fixture-SUSPECT.txt": ("sglang", "generation_tokens"),
    "tgi-datadog-fixture-TRUNCATED.txt": ("tgi", "requests_running"),
    # Request outcomes only: recognised (their families are markers), nothing to read.
    "triton-23.10-trtllm-ensemble-issue49-FRAGMENT.txt": ("triton", ""),
    "triton-24.x-vllm-backend-issue7583-FRAGMENT.txt": ("triton", ""),
    "triton-datadog-fixture-TRUNCATED.txt": ("triton", "busy_seconds"),
    "triton-trtllm-backend-23.11-readme.txt": ("triton", "kv_cache_usage"),
    "vllm-0.10.0-v1-production-stack-issue617-FRAGMENTS.txt": ("vllm", "kv_cache_usage"),
    "vllm-0.4.x-v0-datadog-fixture-plus-appended-v1-families.txt": ("vllm", "generation_tokens"),
    "vllm-0.7-v0-aibrix-runtime-docs-PARTIAL.txt": ("vllm", "generation_tokens"),
    "vllm-0.8.x-v1-production-stack-issue318-FRAGMENTS.txt": ("vllm", "requests_running"),
    "llamacpp-0.3.36-live.txt": ("llama.cpp", "generation_tokens"),
}
UNPARSEABLE = {"vllm-0.8-v1-docs-design-metrics-PARTIAL.txt"}  # ",..." inside a label set


def _files() -> list[str]:
    return sorted(p.name for p in FOLDER.glob("*.txt"))


def _body(name: str) -> str:
    """The exposition without the README's annotations (line 1, "$ " prompts, "...")."""
    lines = (FOLDER / name).read_text().splitlines()[1:]
    return "\n".join(x for x in lines if not x.startswith("$ ") and x != "...") + "\n"


def test_every_capture_is_covered() -> None:
    assert set(_files()) == set(EXPECTED) | UNPARSEABLE


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_is_recognised_and_read(name: str) -> None:
    engine, signal = EXPECTED[name]
    reading = interpret(_body(name))
    assert reading.engine == engine
    if signal:
        assert any(key[0] == signal for key in reading.values), sorted(reading.values)
    else:
        assert not reading.values, sorted(reading.values)
    assert all(v == v for v in reading.values.values())  # no NaN sneaks through


@pytest.mark.parametrize("name", sorted(UNPARSEABLE))
def test_broken_capture_is_a_clean_parse_error(name: str) -> None:
    with pytest.raises(ExpositionError, match="not Prometheus text"):
        parse(_body(name))


def test_broken_line_in_a_family_no_table_reads_costs_nothing() -> None:
    """The ",..." is in vllm:cache_config_info, which no table reads: only the families the
    engine's table reads are parsed (issue 22 item 5), so the rest of the capture counts."""
    reading = interpret(_body("vllm-0.8-v1-docs-design-metrics-PARTIAL.txt"))
    assert reading.engine == "vllm"
    model = "meta-llama/Llama-3.1-8B-Instruct"
    assert reading.values[("generation_tokens", model, "")] == 27453


# file -> {signal: value} for prompt tokens computed and served from the prefix cache
PROMPT_SPLIT = {
    # prompt_tokens_total (5) includes cached_tokens_total (1)
    "sglang-0.5.10-datadog-fixture-SUSPECT.txt": {"prompt_tokens": 4.0,
                                                  "prompt_cached_tokens": 1.0},
    # prompt_tokens_by_source{source=local_compute|local_cache_hit}
    "vllm-0.4.x-v0-datadog-fixture-plus-appended-v1-families.txt": {
        "prompt_tokens": 53.0, "prompt_cached_tokens": 64.0},
}


@pytest.mark.parametrize("name", sorted(PROMPT_SPLIT))
def test_prompt_tokens_are_computed_ones_and_cached_are_their_own(name: str) -> None:
    reading = interpret(_body(name))
    found = {key[0]: value for key, value in reading.net().items()
             if key[0] in PROMPT_SPLIT[name]}
    assert found == PROMPT_SPLIT[name]


def test_sglang_05_generation_and_retractions() -> None:
    reading = interpret(_body("sglang-0.5.10-datadog-fixture-SUSPECT.txt"))
    model = "facebook/opt-125m"
    assert reading.values[("generation_tokens", model, "")] == 32.0
    # 0.5 has only the num_retracted_reqs gauge: read as preemptions, counted by its rises
    assert reading.values[("preemptions", model, "")] == 0.0
    assert "preemptions" in reading.rises


def test_llamacpp_live_capture_reads_the_clients_token_counts() -> None:
    """The real llama-server capture (tests/support/llamacpp.py capture()): what the exporter
    reads from it equals what the server told its clients, the 6-digit average included."""
    record = json.loads((FOLDER / "llamacpp-0.3.36-live.json").read_text())
    reading = interpret(_body("llamacpp-0.3.36-live.txt"))
    clients = record["clients"]
    assert reading.net() == {
        ("generation_tokens", "", ""): clients["generation"],
        ("prompt_tokens", "", ""): clients["prompt"],
        ("prompt_cached_tokens", "", ""): clients["prompt_cached"],
        ("requests_running", "", ""): 0.0,
        ("requests_waiting", "", ""): 0.0,
    }
    assert "generation_tokens" in reading.derived
    assert record["headers"]["Process-Start-Time-Unix"].isdigit()
