"""Engine values are checked at the edge: NaN, infinities and negatives are dropped, never
republished, and counted per target in goodput_serving_target_dropped_values_total."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from exporter.snapshot import SourceResult
from exporter.sources.serving.config import ServingConfig, ServingTarget
from tests.support import serving
from tests.support.serving import KV_CACHE, REQUESTS, TOKENS, metric

DROPPED = "goodput_serving_target_dropped_values_total"


def text(ranks: dict[str, str], running: str = "+Inf", waiting: str = "-1") -> str:
    lines = ["# TYPE vllm:generation_tokens_total counter"]
    lines += [f'vllm:generation_tokens_total{{engine="{r}",model_name="m"}} {v}'
              for r, v in ranks.items()]
    lines += [
        "# TYPE vllm:prompt_tokens_total counter",
        'vllm:prompt_tokens_total{engine="0",model_name="m"} NaN',
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}',
        "# TYPE vllm:num_requests_waiting gauge",
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25',
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture
async def engine() -> AsyncIterator[tuple[list[str], str]]:
    body = [text({"0": "100"})]

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=body[0])

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner, base = await serving.start(app)
    yield body, f"{base}/metrics"
    await runner.cleanup()


def gen(result: SourceResult) -> float | None:
    return metric(result, TOKENS, gpu="0", kind="generation", model="m", engine="vllm")


async def test_non_finite_and_negative_values_are_dropped_and_counted(
    engine: tuple[list[str], str],
) -> None:
    body, url = engine
    source = serving.make_source(ServingConfig(targets=[ServingTarget(url=url, gpus=["0"])]))
    try:
        first = await source.poll()
        body[0] = text({"0": "120"}, running="-Inf", waiting="2")
        second = await source.poll()
    finally:
        await source.close()
    assert gen(first) == 100.0
    assert metric(first, TOKENS, gpu="0", kind="prompt") is None  # NaN counter
    assert metric(first, REQUESTS, gpu="0", state="running") is None  # +Inf gauge
    assert metric(first, REQUESTS, gpu="0", state="waiting") is None  # negative gauge
    assert metric(first, KV_CACHE, gpu="0") == 0.25
    assert metric(first, DROPPED, target=url, reason="non_finite") == 2.0
    assert metric(first, DROPPED, target=url, reason="negative") == 1.0
    assert gen(second) == 120.0
    assert metric(second, REQUESTS, gpu="0", state="waiting") == 2.0
    assert metric(second, REQUESTS, gpu="0", state="running") is None
    assert metric(second, DROPPED, target=url, reason="non_finite") == 4.0  # cumulative
    assert metric(second, DROPPED, target=url, reason="negative") == 1.0
    for _name, _labels, value in serving.exposition(second):
        assert value == value and abs(value) != float("inf")


async def test_a_bad_rank_skips_the_sum_instead_of_faking_a_reset(
    engine: tuple[list[str], str],
) -> None:
    body, url = engine
    source = serving.make_source(ServingConfig(targets=[ServingTarget(url=url, gpus=["0"])]))
    totals = []
    try:
        for ranks in ({"0": "100", "1": "50"}, {"0": "105", "1": "NaN"},
                      {"0": "110", "1": "60"}):
            body[0] = text(ranks)
            totals.append(gen(await source.poll()))
    finally:
        await source.close()
    # Summing only rank 0 (105) would read as a restart and count rank 1's 60 again.
    assert totals == [150.0, 150.0, 170.0]


async def test_healthy_target_shows_zero_drops(engine: tuple[list[str], str]) -> None:
    body, url = engine
    body[0] = serving.vllm_text(10.0, 5.0)
    source = serving.make_source(ServingConfig(targets=[ServingTarget(url=url, gpus=["0"])]))
    try:
        result = await source.poll()
    finally:
        await source.close()
    assert metric(result, DROPPED, target=url, reason="non_finite") == 0.0
    assert metric(result, DROPPED, target=url, reason="negative") == 0.0
