"""Every alias table against a small exposition in its engine's own shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.sources.serving.adapter import UnknownEngine, detect
from exporter.sources.serving.engines import TABLES
from exporter.sources.serving.exposition import ExpositionError, parse
from exporter.sources.serving.scrape import interpret
from exporter.sources.serving.signals import SIGNALS

FIXTURES = Path(__file__).parent / "fixtures"

# file -> (engine, version, {(signal, model, gpu_uuid, reason): value}, {signal: live})
CASES = {
    "vllm_v1.txt": ("vllm", "v1", {
        ("prompt_tokens", "m1", ""): 1500.0,
        ("generation_tokens", "m1", ""): 600.0,
        ("requests_running", "m1", ""): 5.0,
        ("requests_waiting", "m1", ""): 1.0,
        ("kv_cache_usage", "m1", ""): 0.4,
        ("preemptions", "m1", ""): 4.0,
        ("flops_per_gpu", "m1", ""): 2e15,
    }, {"generation_tokens": True}),
    "vllm_v0.txt": ("vllm", "v0", {
        ("generation_tokens", "old", ""): 120.0,
        ("kv_cache_usage", "old", ""): 0.25,
    }, {"generation_tokens": True}),
    "ray_vllm_otel.txt": ("ray-vllm", "v1-otel", {
        ("generation_tokens", "rm", ""): 900.0,
        ("requests_running", "rm", ""): 6.0,
        ("kv_cache_usage", "rm", ""): 0.7,
    }, {}),
    "sglang_new.txt": ("sglang", "0.3+", {
        ("prompt_tokens", "qwen", ""): 300.0,  # prefill_compute only
        ("prompt_cached_tokens", "qwen", ""): 100.0,  # prefill_cache
        ("generation_tokens", "qwen", ""): 200.0,  # generation_tokens, not realtime
        ("requests_running", "qwen", ""): 4.0,
        ("requests_waiting", "qwen", ""): 1.0,
        ("kv_cache_usage", "qwen", ""): 0.6,
        ("busy_seconds", "qwen", ""): 12.5,
        ("preemptions", "qwen", ""): 3.0,
    }, {"generation_tokens": False, "prompt_tokens": True}),
    "sglang_old.txt": ("sglang", "0.3+", {
        ("prompt_tokens", "/models/llama", ""): 64.0,
        ("generation_tokens", "/models/llama", ""): 32.0,
        ("requests_running", "/models/llama", ""): 2.0,
    }, {"generation_tokens": False}),
    "tgi.txt": ("tgi", "1+", {
        ("generation_tokens", "", ""): 640.0,
        ("prompt_tokens", "", ""): 1500.0,
        ("requests_running", "", ""): 5.0,
        ("requests_waiting", "", ""): 3.0,
        ("busy_seconds", "", ""): 7.5,
    }, {"generation_tokens": False}),
    "triton_trtllm.txt": ("triton", "23+", {
        ("generation_tokens", "tensorrt_llm", ""): 2000.0,
        ("requests_running", "tensorrt_llm", ""): 6.0,
        ("requests_waiting", "tensorrt_llm", ""): 2.0,
        ("kv_cache_usage", "tensorrt_llm", ""): 0.35,
        ("busy_seconds", "tensorrt_llm", "GPU-aaaa"): 3.0,
    }, {"generation_tokens": False}),
    "trtllm_serve.txt": ("trtllm-serve", "1.0+", {
        ("generation_tokens", "tl", ""): 5000.0,
        ("requests_running", "tl", ""): 7.0,
        ("kv_cache_usage", "tl", ""): 0.8,
    }, {}),
    "llamacpp.txt": ("llama.cpp", "b3000+", {
        ("prompt_tokens", "", ""): 420.0,
        ("generation_tokens", "", ""): 840.0,  # no busy-slots family: at request end
        ("requests_running", "", ""): 1.0,
    }, {"generation_tokens": False}),
    "llamacpp_live.txt": ("llama.cpp", "b3000+", {
        ("prompt_tokens", "", ""): 4096.0,
        # n_decode_total x n_busy_slots_per_decode, not tokens_predicted_total (512)
        ("generation_tokens", "", ""): float(round(1.20003e6 * 2.54167)),
        ("requests_running", "", ""): 3.0,
    }, {"generation_tokens": True}),
    "llamacpp_spec.txt": ("llama.cpp", "b3000+", {
        ("prompt_tokens", "", ""): 44.0,
        # 11 decode calls x 2.54545 busy slots + 172 accepted draft tokens (test_settle.py)
        ("generation_tokens", "", ""): 200.0,
        ("requests_running", "", ""): 0.0,
    }, {"generation_tokens": True}),
    "lmdeploy.txt": ("lmdeploy", "0.9+", {
        ("generation_tokens", "internlm", ""): 33.0,
        ("kv_cache_usage", "internlm", ""): 0.1,
    }, {}),
    "nim.txt": ("nim", "1.x", {
        ("generation_tokens", "meta/llama", ""): 3000.0,
        ("kv_cache_usage", "meta/llama", ""): 0.05,
    }, {}),
}


def test_every_fixture_has_its_case() -> None:
    """A capture added without its row here would only be scanned, never checked."""
    assert sorted(p.name for p in FIXTURES.glob("*.txt")) == sorted(CASES)


def test_llamacpp_slot_seconds_are_not_busy_seconds() -> None:
    reading = interpret((FIXTURES / "llamacpp.txt").read_text())
    assert not [key for key in reading.values if key[0] == "busy_seconds"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_fixture_reads_normalised_signals(name: str) -> None:
    engine, version, expected, live = CASES[name]
    reading = interpret((FIXTURES / name).read_text())
    assert (reading.engine, reading.version) == (engine, version)
    for key, value in expected.items():
        assert reading.net().get(key) == pytest.approx(value), key
    for signal, is_live in live.items():
        assert reading.live[signal] is is_live


def test_triton_names_gpus_per_model() -> None:
    reading = interpret((FIXTURES / "triton_trtllm.txt").read_text())
    assert reading.model_gpus == {"tensorrt_llm": frozenset({"GPU-aaaa", "GPU-bbbb"})}


def test_configured_engine_narrows_detection() -> None:
    families = parse((FIXTURES / "vllm_v0.txt").read_text())
    assert detect(families, "vllm").engine == "vllm"
    with pytest.raises(UnknownEngine, match="engine 'tgi'"):
        detect(families, "tgi")


def test_unknown_families_are_an_unknown_engine() -> None:
    with pytest.raises(UnknownEngine):
        detect(parse("# TYPE node_load1 gauge\nnode_load1 0.5\n"))


def test_target_model_fills_unlabelled_engines() -> None:
    reading = interpret((FIXTURES / "tgi.txt").read_text(), model="zephyr")
    assert reading.values[("generation_tokens", "zephyr", "")] == 640.0


@pytest.mark.parametrize(
    "body", ["\x00\x01garbage{{{", 'vllm:x{a="b\n', "# TYPE a counter\na 1 two\n"]
)
def test_bad_text_is_an_exposition_error(body: str) -> None:
    with pytest.raises(ExpositionError, match="not Prometheus text"):
        parse(body)


def test_tables_only_name_known_signals() -> None:
    for table in TABLES:
        assert set(table.signals) <= set(SIGNALS), table.engine
        assert all(rules for rules in table.signals.values())


def test_triton_vllm_backend_is_recognised() -> None:
    text = (
        '# TYPE nv_inference_count counter\nnv_inference_count{model="v",version="1"} 3\n'
        '# TYPE vllm:generation_tokens_total counter\n'
        'vllm:generation_tokens_total{model="v",version="1"} 9\n'
    )
    reading = interpret(text)
    assert reading.engine == "triton-vllm"
    assert reading.values[("generation_tokens", "v", "")] == 9.0
