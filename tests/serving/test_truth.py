"""Counter semantics against recorded engine output served on loopback, scrape by scrape.

Each test serves a sequence of expositions (and headers) the way the engine writes them and
checks the published per-GPU totals, so ``rate()`` over them is the engine's real work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from exporter.sources.serving.config import ServingConfig, ServingTarget
from exporter.sources.serving.source import ServingSource
from tests.support.serving import PREEMPTIONS, TOKENS, make_source, metric, start, vllm_text

FIXTURES = Path(__file__).parent / "fixtures"


@dataclass
class Script:
    """What the fake engine answers now: /metrics body and headers, /v1/models body."""

    body: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    models: str = ""
    model_calls: int = 0


@pytest.fixture
async def engine() -> AsyncIterator[tuple[Script, str]]:
    script = Script()

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=script.body, headers=dict(script.headers))

    async def models(_: web.Request) -> web.Response:
        script.model_calls += 1
        if not script.models:
            return web.Response(status=404)
        return web.Response(text=script.models, content_type="application/json")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", models)
    runner, base = await start(app)
    yield script, f"{base}/metrics"
    await runner.cleanup()


def source_for(url: str, **target: object) -> ServingSource:
    config = ServingConfig(targets=[ServingTarget(url=url, **target)], timeout=1, interval=0.1)
    return make_source(config)


def llamacpp(decodes: str, per_decode: str, predicted: float = 0.0, **extra: float) -> str:
    """llama-server's /metrics at one moment, in its own number format."""
    text = (FIXTURES / "llamacpp_live.txt").read_text()
    text = text.replace("llamacpp:n_decode_total 1.20003e+06", f"llamacpp:n_decode_total {decodes}")
    text = text.replace("llamacpp:n_busy_slots_per_decode 2.54167",
                        f"llamacpp:n_busy_slots_per_decode {per_decode}")
    text = text.replace("llamacpp:tokens_predicted_total 512",
                        f"llamacpp:tokens_predicted_total {predicted:g}")
    for name, value in extra.items():
        text += f"# TYPE llamacpp:{name} counter\nllamacpp:{name} {value:g}\n"
    return text


async def test_llamacpp_generation_is_live_and_rounding_is_not_a_restart(
    engine: tuple[Script, str],
) -> None:
    script, url = engine
    source = source_for(url, gpus=["0"])
    seen = []
    try:
        # Two slots busy on every decode; tokens_predicted only moves when a request ends.
        # The third scrape prints the average one digit lower: the product dips by 0.3.
        for decodes, per_decode, predicted in (
            ("1000", "2", 0.0), ("1500", "2", 0.0), ("1500", "1.99980", 0.0),
            ("2000", "2", 900.0),
        ):
            script.body = llamacpp(decodes, per_decode, predicted)
            result = await source.poll()
            seen.append(metric(result, TOKENS, gpu="0", kind="generation", engine="llama.cpp"))
    finally:
        await source.close()
    assert seen == [2000.0, 3000.0, 3000.0, 4000.0]


async def test_llamacpp_generation_is_a_whole_number_of_tokens(
    engine: tuple[Script, str],
) -> None:
    script, url = engine
    source = source_for(url, gpus=["0"])
    seen = []
    try:
        # 7 busy slot-decodes over 3 decodes print as 2.33333; 3 x 2.33333 is 6.99999.
        # Then 1001 over 300 (3.33667 printed): 1001.001 without rounding.
        for decodes, per_decode in (("3", "2.33333"), ("300", "3.33667")):
            script.body = llamacpp(decodes, per_decode)
            result = await source.poll()
            seen.append(metric(result, TOKENS, gpu="0", kind="generation", engine="llama.cpp"))
    finally:
        await source.close()
    assert seen == [7.0, 1001.0]


async def test_cached_prompt_tokens_are_their_own_kind(engine: tuple[Script, str]) -> None:
    script, url = engine
    source = source_for(url, gpus=["0"])
    try:
        script.body = llamacpp("10", "1", prompt_tokens_cached=1000.0)
        llama = await source.poll()
    finally:
        await source.close()
    assert metric(llama, TOKENS, gpu="0", kind="prompt", engine="llama.cpp") == 4096.0
    assert metric(llama, TOKENS, gpu="0", kind="prompt_cached", engine="llama.cpp") == 1000.0

    # vLLM V1 before prompt_tokens_by_source: prompt_tokens counts cache hits too.
    source = source_for(url, gpus=["0"])
    try:
        script.body = vllm_text(generation=50.0, prompt=700.0) + (
            "# TYPE vllm:prefix_cache_hits_total counter\n"
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 256\n'
        )
        vllm = await source.poll()
    finally:
        await source.close()
    assert metric(vllm, TOKENS, gpu="0", kind="prompt", engine="vllm") == 444.0
    assert metric(vllm, TOKENS, gpu="0", kind="prompt_cached", engine="vllm") == 256.0


async def test_restart_seen_by_start_time_keeps_the_old_process_counts(
    engine: tuple[Script, str],
) -> None:
    script, url = engine
    source = source_for(url, gpus=["0"])
    seen = []
    try:
        # vLLM (prometheus_client's process collector): while the engine could not be
        # scraped ("" = a failed scrape) it restarted and has already made more tokens than
        # the old one had; a drop test would miss it, the new start time shows it.
        for started, generation in ((1.7e9, 1000.0), (1.7e9, 1200.0), (0, 0), (1.7e9 + 60, 1500.0),
                                    (1.7e9 + 60, 1600.0)):
            script.body = vllm_text(generation) + (
                "# TYPE process_start_time_seconds gauge\n"
                f"process_start_time_seconds {started}\n"
            ) if started else ""
            result = await source.poll()
            seen.append(metric(result, TOKENS, gpu="0", kind="generation"))
    finally:
        await source.close()
    assert seen == [1000.0, 1200.0, 1200.0, 2700.0, 2800.0]


async def test_start_time_that_changes_between_good_scrapes_adds_nothing(
    engine: tuple[Script, str],
) -> None:
    """A start time flapping on every scrape, counters flat or growing: only growth counts
    (the issue's measured case published 13 million tokens in 12 s)."""
    script, url = engine
    source = source_for(url, gpus=["0"])
    seen = []
    try:
        with capture_logs() as logs:
            for i, generation in enumerate((1000.0, 1000.0, 1000.0, 1100.0, 1100.0)):
                script.body = vllm_text(generation) + (
                    "# TYPE process_start_time_seconds gauge\n"
                    f"process_start_time_seconds {1.7e9 + i}\n"
                )
                result = await source.poll()
                seen.append(metric(result, TOKENS, gpu="0", kind="generation"))
    finally:
        await source.close()
    assert seen == [1000.0, 1000.0, 1000.0, 1100.0, 1100.0]
    flaps = [e for e in logs if e["event"] == "serving_start_time_changed_without_restart"]
    assert len(flaps) == 1


async def test_llamacpp_restart_seen_by_its_start_header(engine: tuple[Script, str]) -> None:
    script, url = engine
    source = source_for(url, gpus=["0"])
    seen = []
    try:
        for token, decodes in (("4711", "100"), ("4711", "150"), ("", ""), ("9012", "400")):
            script.body = llamacpp(decodes, "1") if token else ""
            script.headers = {"Process-Start-Time-Unix": token} if token else {}
            result = await source.poll()
            seen.append(metric(result, TOKENS, gpu="0", kind="generation"))
    finally:
        await source.close()
    assert seen == [100.0, 150.0, 150.0, 550.0]


async def test_sglang_05_retractions_count_by_rises_of_the_gauge(
    engine: tuple[Script, str],
) -> None:
    script, url = engine
    source = source_for(url, gpus=["0", "1"])
    seen = []
    try:
        for retracted in (0, 2, 2, 1, 3):
            script.body = (
                "# TYPE sglang:generation_tokens_total counter\n"
                'sglang:generation_tokens_total{model_name="q",tp_rank="0"} 10\n'
                "# TYPE sglang:num_retracted_reqs gauge\n"
                f'sglang:num_retracted_reqs{{model_name="q",tp_rank="0"}} {retracted}\n'
            )
            result = await source.poll()
            seen.append(metric(result, PREEMPTIONS, gpu="0", engine="sglang"))
    finally:
        await source.close()
    # rises 0, +2, 0, (fall), +2; split over the engine's two GPUs
    assert seen == [0.0, 1.0, 1.0, 1.0, 2.0]


async def test_llamacpp_model_name_from_v1_models_once_per_process(
    engine: tuple[Script, str],
) -> None:
    script, url = engine
    script.body = llamacpp("10", "1")
    # llama-server's answer shape: OpenAI list, the id is the alias or the model path
    script.models = (
        '{"models":[{"name":"qwen2.5-7b","model":"qwen2.5-7b"}],"object":"list",'
        '"data":[{"id":"qwen2.5-7b","object":"model","owned_by":"llamacpp",'
        '"meta":{"n_params":7615616512}}]}'
    )
    script.headers = {"Process-Start-Time-Unix": "100"}
    source = source_for(url, gpus=["0"])
    try:
        for _ in range(3):
            result = await source.poll()
        assert script.model_calls == 1
        assert metric(result, TOKENS, gpu="0", kind="generation", model="qwen2.5-7b") == 10.0
        assert result.reading is not None
        assert result.reading.targets[0].model == "qwen2.5-7b"
        script.models = script.models.replace("qwen2.5-7b", "llama-3-8b")
        script.headers = {"Process-Start-Time-Unix": "200"}  # restarted with another model
        result = await source.poll()
        await source.poll()
        assert script.model_calls == 2
        # A new process (new start token) whose counters continue none of the old ones
        # is a restart: its counters count whole, under its new name ([fair-2]; before:
        # the new model's first tokens were lost below the old high-water mark).
        assert metric(result, TOKENS, gpu="0", kind="generation", model="llama-3-8b") == 10.0
        script.body = llamacpp("15", "1")
        result = await source.poll()
        assert metric(result, TOKENS, gpu="0", kind="generation", model="llama-3-8b") == 15.0
        assert metric(result, TOKENS, gpu="0", kind="generation", model="qwen2.5-7b") == 10.0
    finally:
        await source.close()


async def test_llamacpp_without_v1_models_keeps_an_empty_model(
    engine: tuple[Script, str],
) -> None:
    script, url = engine
    script.body = llamacpp("10", "1")
    script.headers = {"Process-Start-Time-Unix": "100"}
    source = source_for(url, gpus=["0"])
    try:
        with capture_logs() as logs:
            for _ in range(3):
                result = await source.poll()
    finally:
        await source.close()
    assert script.model_calls == 1  # a failure is not retried on every scrape
    assert metric(result, TOKENS, gpu="0", kind="generation", model="") == 10.0
    assert [e["error"] for e in logs if e["event"] == "serving_model_unknown"] == [
        "/v1/models: http_404: HTTP 404 Not Found"]


async def test_cache_hits_outgrowing_prompt_tokens_do_not_fake_a_restart(
    engine: tuple[Script, str],
) -> None:
    """vLLM before #25787 counted preemption recompute as cache hits, so hits can grow
    faster than prompt tokens for a while: that step computed nothing, it is no reset."""
    script, url = engine
    source = source_for(url, gpus=["0"])
    seen = []
    try:
        for prompt, hits in ((1000.0, 200.0), (1100.0, 400.0), (1300.0, 400.0)):
            script.body = vllm_text(generation=1.0, prompt=prompt) + (
                "# TYPE vllm:prefix_cache_hits_total counter\n"
                f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}\n'
            )
            result = await source.poll()
            seen.append((metric(result, TOKENS, gpu="0", kind="prompt"),
                         metric(result, TOKENS, gpu="0", kind="prompt_cached")))
    finally:
        await source.close()
    assert seen == [(800.0, 200.0), (800.0, 400.0), (1000.0, 400.0)]
