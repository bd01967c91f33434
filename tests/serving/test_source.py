"""The serving source against real misbehaving servers on loopback.

Every broken target costs only itself: the healthy one scraped in the same poll keeps its
tokens, and each failure shows in goodput_serving_target_up and its reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from structlog.testing import capture_logs

from exporter.sources.serving.config import ServingConfig, ServingTarget
from exporter.sources.serving.source import ServingSource
from exporter.sources.serving.targets import Target, static_targets
from tests.support import serving
from tests.support.serving import (
    HUGE_BYTES,
    KV_CACHE,
    REQUESTS,
    SCRAPE_DURATION,
    TARGET_ERROR,
    TARGET_GPUS,
    TARGET_UP,
    TOKENS,
    Zoo,
    metric,
    series,
    start,
    zoo_app,
)

BROKEN = {
    "/hang": "timeout",
    "/drip": "timeout",
    "/500": "http_500",
    "/garbage": "bad_encoding",
    "/truncated": "parse_error",
    "/huge": "body_too_large",
}


@pytest.fixture
async def zoo() -> AsyncIterator[tuple[Zoo, str]]:
    state = Zoo()
    runner, base = await start(zoo_app(state))
    yield state, base
    state.done.set()
    await runner.cleanup()


def make_source(targets: list[ServingTarget], **overrides: float) -> ServingSource:
    config = ServingConfig(
        targets=targets, timeout=overrides.get("timeout", 0.5),
        max_body_bytes=int(overrides.get("max_body_bytes", 1024 * 1024)), interval=0.1,
    )
    return serving.make_source(config)


async def test_broken_targets_fail_alone(zoo: tuple[Zoo, str]) -> None:
    state, base = zoo
    targets = [ServingTarget(url=f"{base}/ok", gpus=["0"])]
    targets += [ServingTarget(url=base + path, gpus=["1"]) for path in BROKEN]
    source = make_source(targets)
    try:
        with capture_logs() as logs:
            result = await source.poll()
            await source.poll()  # unchanged states are not logged again
    finally:
        await source.close()
    assert result.ok
    downs = {e["target"]: e["reason"] for e in logs if e["event"] == "serving_target_down"}
    assert downs == {base + path: reason for path, reason in BROKEN.items()}
    assert len([e for e in logs if e["event"] == "serving_target_down"]) == len(BROKEN)
    ok = f"{base}/ok"
    assert metric(result, TARGET_UP, target=ok, engine="vllm", model="m") == 1.0
    assert metric(result, TARGET_ERROR, target=ok) is None
    assert metric(result, TOKENS, gpu="0", kind="generation", model="m", engine="vllm") == 100.0
    for path, reason in BROKEN.items():
        url = base + path
        assert metric(result, TARGET_UP, target=url) == 0.0, path
        assert metric(result, TARGET_ERROR, target=url, reason=reason) == 1.0, path
        assert metric(result, SCRAPE_DURATION, target=url) is not None
    assert "1" not in result.reading.gpus  # nothing from the broken targets reached GPU 1
    assert {x["gpu"] for x in series(result, TOKENS)} == {"0"}
    assert result.errors == {"timeout": 2, "http_500": 1, "bad_encoding": 1,
                             "parse_error": 1, "body_too_large": 1}
    assert state.huge_sent < HUGE_BYTES // 2  # the read stopped at the cap, not at 50 MB


async def test_garbage_text_is_unknown_engine_or_parse_error(zoo: tuple[Zoo, str]) -> None:
    from aiohttp import web

    async def text_garbage(_: web.Request) -> web.Response:
        return web.Response(text="hello world, not metrics at all {{{\n")

    app = web.Application()
    app.router.add_get("/metrics", text_garbage)
    runner, base = await start(app)
    source = make_source([ServingTarget(url=f"{base}/metrics")])
    try:
        result = await source.poll()
    finally:
        await source.close()
        await runner.cleanup()
    assert metric(result, TARGET_UP, target=f"{base}/metrics") == 0.0
    assert metric(result, TARGET_ERROR, target=f"{base}/metrics", reason="parse_error") == 1.0


async def test_counter_reset_never_goes_backwards(zoo: tuple[Zoo, str]) -> None:
    state, base = zoo
    source = make_source([ServingTarget(url=f"{base}/ok", gpus=["0"])])
    seen = []
    try:
        for value in (1000.0, 1500.0, 200.0, 260.0):  # engine restarted after 1500
            state.generation = value
            result = await source.poll()
            seen.append(metric(result, TOKENS, gpu="0", kind="generation"))
    finally:
        await source.close()
    assert seen == [1000.0, 1500.0, 1700.0, 1760.0]


async def test_target_that_disappears_goes_down_and_keeps_its_counters() -> None:
    from aiohttp import web

    from tests.support.serving import vllm_text

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text=vllm_text(42.0))

    app = web.Application()
    app.router.add_get("/metrics", ok)
    runner, base = await start(app)
    url = f"{base}/metrics"
    source = make_source([ServingTarget(url=url, gpus=["2"])])
    try:
        first = await source.poll()
        await runner.cleanup()
        second = await source.poll()
    finally:
        await source.close()
    assert metric(first, TARGET_UP, target=url) == 1.0
    assert metric(second, TARGET_UP, target=url, engine="vllm", model="m") == 0.0
    assert metric(second, TARGET_ERROR, target=url, reason="connection_refused") == 1.0
    # The counter stays (it must not vanish or drop); live gauges of a dead engine do not.
    assert metric(second, TOKENS, gpu="2", kind="generation") == 42.0
    assert metric(second, REQUESTS, gpu="2", state="running") is None


async def test_tensor_parallel_engine_splits_tokens_and_shares_gauges(
    zoo: tuple[Zoo, str],
) -> None:
    state, base = zoo
    state.generation = 1000.0
    source = make_source([ServingTarget(url=f"{base}/ok", gpus=["0", "GPU-3"])])
    try:
        result = await source.poll()
    finally:
        await source.close()
    for gpu in ("0", "3"):
        assert metric(result, TOKENS, gpu=gpu, kind="generation") == 500.0
        assert metric(result, REQUESTS, gpu=gpu, state="running") == 3.0
        assert metric(result, KV_CACHE, gpu=gpu) == 0.25
    assert metric(result, TARGET_GPUS, target=f"{base}/ok", via="explicit") == 2.0


async def test_no_attribution_publishes_tokens_at_node_level(zoo: tuple[Zoo, str]) -> None:
    """A URL-only target with no matching process: its tokens are kept as node-level rows
    (no gpu label), and the reason is logged once."""
    state, base = zoo
    source = make_source([ServingTarget(url=f"{base}/ok")])
    try:
        with capture_logs() as logs:
            result = await source.poll()
            state.generation = 150.0
            later = await source.poll()
    finally:
        await source.close()
    assert metric(result, TARGET_UP, target=f"{base}/ok") == 1.0
    assert metric(result, TARGET_GPUS, target=f"{base}/ok", via="none") == 0.0
    assert [labels.get("gpu") for labels in series(result, TOKENS)] == [None, None]
    assert metric(result, TOKENS, kind="generation", model="m", engine="vllm") == 100.0
    assert metric(later, TOKENS, kind="generation") == 150.0
    assert metric(later, REQUESTS, state="running") == 3.0
    assert result.reading is not None and set(result.reading.gpus) == {""}
    lines = [e for e in logs if e["event"] == "serving_target_unattributed"]
    assert len(lines) == 1
    assert lines[0]["target"] == f"{base}/ok"
    assert "no compute process" in lines[0]["reason"]


async def test_badly_annotated_pod_is_reported_without_a_request() -> None:
    config = ServingConfig(interval=0.1)
    bad = Target("http://10.0.0.1:http/metrics", namespace="ml", pod="p",
                 origin="kubernetes", invalid="serving.goodput.dev/port 'http' is not a port")
    source = serving.make_source(config, targets=[bad])
    try:
        result = await source.poll()
    finally:
        await source.close()
    # Named by namespace/pod:port: a pod IP never becomes a label value.
    assert bad.name == "ml/p:"
    assert metric(result, TARGET_UP, target=bad.name) == 0.0
    assert metric(result, TARGET_ERROR, target=bad.name, reason="bad_annotation") == 1.0
    assert not [x for x in serving.exposition(result) if "10.0.0.1" in str(x)]


def test_config_names_the_bad_serving_setting() -> None:
    from exporter.wiring.config import ConfigError, build

    with pytest.raises(ConfigError, match=r"'serving\.extra_targets'.*not an http"):
        build({"serving": {"extra_targets": ["ftp://x"]}}, environ={})
    with pytest.raises(ConfigError, match="unknown engine 'vlm'"):
        build({"serving": {"targets": [{"url": "http://x", "engine": "vlm"}]}}, environ={})
    settings = build({"serving": {"targets": ["http://a/metrics"],
                                  "extra_targets": ["http://b/metrics", "http://a/metrics"]}},
                     environ={})
    assert [t.url for t in static_targets(settings.section(ServingConfig))] == [
        "http://a/metrics", "http://b/metrics"]


def test_target_names_carry_no_credentials_or_pod_ips() -> None:
    assert Target("http://u:secret@h:8000/metrics?token=x#f").name == (
        "http://h:8000/metrics?token=<secret>"
    )
    pod = Target("http://10.1.0.7:8000/metrics", namespace="ml", pod="vllm-0")
    assert pod.name == "ml/vllm-0:8000"
