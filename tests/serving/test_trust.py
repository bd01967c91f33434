"""Hostile engines on loopback against the serving source's bounds (issue 22, "trust").

Each engine here misbehaves the way the issue measured: model names that churn, counters
that jump to 1e18 or 1e308, the same endpoint under several spellings, secrets in the URL,
targets that vanish. What is checked is what /metrics would show: bounded series, counters
that only grow by plausible amounts, and a count with a reason for everything dropped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from exporter.sources.serving.config import ServingConfig, ServingTarget
from exporter.sources.serving.discovery import pod_target
from exporter.sources.serving.source import ServingSource
from exporter.sources.serving.targets import Target, TargetSet, static_targets
from exporter.wiring.config import ConfigError, build
from tests.support.serving import (
    TARGET_ERROR,
    TARGET_UP,
    TOKENS,
    exposition,
    inventory,
    metric,
    series,
    start,
    vllm_text,
)

DROPPED = "goodput_serving_target_dropped_values_total"
TARGETS_DROPPED = "goodput_serving_targets_dropped"


@dataclass
class Engine:
    """What the hostile engine serves at /metrics: a fresh body per request."""

    bodies: list[str] = field(default_factory=list)
    default: str = ""
    queries: list[str] = field(default_factory=list)

    def next(self) -> str:
        return self.bodies.pop(0) if self.bodies else self.default


@pytest.fixture
async def engine() -> AsyncIterator[tuple[Engine, str]]:
    state = Engine()

    async def metrics(request: web.Request) -> web.Response:
        state.queries.append(request.query_string)
        return web.Response(text=state.next())

    async def down(_: web.Request) -> web.Response:
        return web.Response(status=500, text="no")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/down", down)
    runner, base = await start(app)
    yield state, base
    await runner.cleanup()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def source(
    config: ServingConfig, clock: Clock, targets: TargetSet | None = None
) -> ServingSource:
    devices = inventory(2)
    return ServingSource(
        config,
        targets or TargetSet(static_targets(config), config.max_targets),
        inventory=lambda: devices,
        clock=clock,
    )


def config(*urls: str, **extra: object) -> ServingConfig:
    return ServingConfig(
        targets=[ServingTarget(url=u, gpus=["0"]) for u in urls], timeout=1.0, **extra
    )


def token_models(result: object) -> set[str]:
    return {labels["model"] for labels in series(result, TOKENS)}  # type: ignore[arg-type]


async def test_model_name_churn_adds_at_most_the_cap_and_no_tokens(
    engine: tuple[Engine, str],
) -> None:
    """A model name new on every scrape, counters flat (the engine does no work): at most
    max_models names are ever published at once, the published tokens never grow past the
    first reading, and the drops are counted and logged once."""
    state, base = engine
    state.bodies = [vllm_text(5e8, 1e8, model=f"m{i}") for i in range(300)]
    clock = Clock()
    src = source(config(f"{base}/metrics", max_models_per_target=4, stale_after=60.0), clock)
    most, first_total, result = 0, None, None
    try:
        with capture_logs() as logs:
            for _ in range(300):
                result = await src.poll()
                clock.now += 1.0
                models = token_models(result)
                most = max(most, len(models))
                total = sum(v for n, _, v in exposition(result) if n == TOKENS)
                first_total = total if first_total is None else first_total
                assert total <= first_total
    finally:
        await src.close()
    assert most <= 4
    url = f"{base}/metrics"
    assert (metric(result, DROPPED, target=url, reason="max_models") or 0) > 0
    # Each name admitted after the first reading starts from its value ([tenancy]).
    assert (metric(result, DROPPED, target=url, reason="new_series") or 0) > 0
    caps = [e for e in logs if e["event"] == "serving_target_over_model_cap"]
    assert len(caps) == 1
    # Bounded state, not only bounded output.
    ledger = src._states[src._targets()[0].key].ledger
    assert len(ledger.models) <= 4 and len(ledger._tracker) <= 128 * 4


async def test_one_body_with_thousands_of_models_publishes_the_cap(
    engine: tuple[Engine, str],
) -> None:
    state, base = engine
    lines = ["# TYPE vllm:generation_tokens_total counter"]
    lines += [f'vllm:generation_tokens_total{{model_name="m{i}"}} 10' for i in range(20_000)]
    state.default = "\n".join(lines) + "\n"
    clock = Clock()
    src = source(config(f"{base}/metrics"), clock)
    try:
        result = await src.poll()
    finally:
        await src.close()
    assert len(token_models(result)) == 8
    assert metric(result, DROPPED, target=f"{base}/metrics", reason="max_models") == 20_000 - 8


async def test_long_model_names_are_cut_and_counted(engine: tuple[Engine, str]) -> None:
    state, base = engine
    state.default = vllm_text(10.0, model="x" * 5000)
    src = source(config(f"{base}/metrics", max_label_length=64), Clock())
    try:
        result = await src.poll()
    finally:
        await src.close()
    assert token_models(result) == {"x" * 64}
    assert all(len(labels["model"]) <= 64 for labels in series(result, TARGET_UP))
    assert (metric(result, DROPPED, target=f"{base}/metrics", reason="label_too_long") or 0) > 0


async def test_huge_jumps_and_overflow_are_dropped_and_counting_goes_on(
    engine: tuple[Engine, str],
) -> None:
    """1e18 then 1e308 then +Inf: none is published, every published sample is finite,
    and ordinary growth after them still counts (the GPU's counter does not freeze)."""
    state, base = engine
    raw = ["100", "1e18", "1e308", "+Inf", "NaN", "1e308", "150", "250"]
    state.bodies = [vllm_text(0).replace(
        'model_name="m"} 0\n', f'model_name="m"}} {v}\n', 1) for v in raw]
    clock = Clock()
    src = source(config(f"{base}/metrics"), clock)
    seen = []
    try:
        with capture_logs() as logs:
            for _ in raw:
                result = await src.poll()
                clock.now += 1.0
                assert all(v == v and abs(v) != float("inf") for _, _, v in exposition(result))
                seen.append(metric(result, TOKENS, gpu="0", kind="generation"))
    finally:
        await src.close()
    # logged once, not once per implausible value
    assert len([e for e in logs if e["event"] == "serving_counter_implausible"]) == 1
    # 100; 1e18 implausible; 1e308 implausible; +Inf/NaN refused at the edge; 1e308 flat;
    # 150 is a reset (the new value counts); 250 grows by 100.
    assert seen == [100.0, 100.0, 100.0, 100.0, 100.0, 100.0, 250.0, 350.0]
    url = f"{base}/metrics"
    assert metric(result, DROPPED, target=url, reason="implausible") == 2.0
    assert metric(result, DROPPED, target=url, reason="non_finite") == 2.0


async def test_one_endpoint_under_several_spellings_is_scraped_and_counted_once(
    engine: tuple[Engine, str],
) -> None:
    state, base = engine
    state.default = vllm_text(100.0)
    host = base.removeprefix("http://")
    spellings = [f"{base}/metrics", f"{base}/metrics#frag", f"HTTP://{host.upper()}/metrics"]
    with capture_logs() as logs:
        cfg = config(*spellings)
        src = source(cfg, Clock())
    try:
        result = await src.poll()
    finally:
        await src.close()
    assert len(series(result, TARGET_UP)) == 1
    assert metric(result, TOKENS, gpu="0", kind="generation") == 100.0
    assert len(state.queries) == 1
    assert len([e for e in logs if e["event"] == "serving_target_duplicate"]) == 2


async def test_discovered_duplicates_and_targets_past_the_cap_are_dropped_and_counted(
    engine: tuple[Engine, str],
) -> None:
    state, base = engine
    state.default = vllm_text(1.0)
    cfg = config(f"{base}/metrics", max_targets=3)
    targets = TargetSet(static_targets(cfg), cfg.max_targets)
    targets.set_discovered(
        [Target(url=f"{base}/metrics#dup", origin="kubernetes", namespace="ml", pod="dup")]
        + [Target(url=f"{base}/metrics/{i}", origin="kubernetes", namespace="ml",
                  pod=f"p{i}") for i in range(5)]
    )
    src = source(cfg, Clock(), targets)
    try:
        with capture_logs() as logs:
            result = await src.poll()
            await src.poll()  # still over the cap: no second line
    finally:
        await src.close()
    assert len([e for e in logs if e["event"] == "serving_targets_over_cap"]) == 1
    assert len(series(result, TARGET_UP)) == 3
    assert metric(result, TARGETS_DROPPED, reason="duplicate") == 1.0
    assert metric(result, TARGETS_DROPPED, reason="max_targets") == 3.0


async def test_a_malformed_discovered_target_goes_down_alone(engine: tuple[Engine, str]) -> None:
    state, base = engine
    state.default = vllm_text(7.0)
    notes = {"serving.goodput.dev/scrape": "true", "serving.goodput.dev/path": "/me trics"}
    pod = SimpleNamespace(
        metadata=SimpleNamespace(annotations=notes, namespace="ml", name="bad"),
        spec=SimpleNamespace(node_name="n1", containers=[]),
        status=SimpleNamespace(phase="Running", pod_ip="10.1.0.7"),
    )
    notes["serving.goodput.dev/port"] = "8000"
    bad = pod_target(pod, "n1", "serving.goodput.dev/")
    assert bad is not None and bad.invalid_reason == "bad_url"
    cfg = config(f"{base}/metrics")
    targets = TargetSet(static_targets(cfg), cfg.max_targets)
    targets.set_discovered([bad])
    src = source(cfg, Clock(), targets)
    try:
        result = await src.poll()
    finally:
        await src.close()
    assert metric(result, TARGET_UP, target="ml/bad:8000") == 0.0
    assert metric(result, TARGET_ERROR, target="ml/bad:8000", reason="bad_url") == 1.0
    assert metric(result, TARGET_UP, target=f"{base}/metrics") == 1.0
    assert metric(result, TOKENS, gpu="0", kind="generation") == 7.0


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://[::1/metrics", "not a valid URL"),
        ("http:///metrics", "names no host"),
        ("ftp://h/metrics", r"not an http\(s\) URL"),
        ("http://h:99999/metrics", "not a valid URL"),
    ],
)
def test_a_malformed_static_url_is_a_config_error(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build({"serving": {"targets": [url]}}, environ={})
    with pytest.raises(ConfigError, match=message):
        build({"serving": {"extra_targets": [url]}}, environ={})


def test_static_targets_over_the_cap_are_a_config_error() -> None:
    urls = [f"http://127.0.0.1:{8000 + i}/metrics" for i in range(5)]
    with pytest.raises(ConfigError, match="more than max_targets"):
        build({"serving": {"targets": urls, "max_targets": 4}}, environ={})


async def test_secrets_in_urls_never_reach_labels_or_logs_but_are_sent(
    engine: tuple[Engine, str],
) -> None:
    state, base = engine
    state.default = vllm_text(3.0)
    host = base.removeprefix("http://")
    good = f"http://reader:pw-{'s3cr3t'}@{host}/metrics?token=hunter22&x=1"
    down = f"http://{host}/down?api_key=topsecret99"
    refused = "http://user:pass-word-9@127.0.0.1:1/metrics?token=abcdef123"
    src = source(config(good, down, refused), Clock())
    try:
        with capture_logs() as logs:
            result = await src.poll()
    finally:
        await src.close()
    shown = repr(exposition(result)) + repr(logs) + repr(result)
    for secret in ("s3cr3t", "hunter22", "topsecret99", "pass-word-9", "abcdef123", "reader"):
        assert secret not in shown, secret
    assert f"{base}/metrics?token=<secret>&x=1" in {
        labels["target"] for labels in series(result, TARGET_UP)
    }
    assert state.queries == ["token=hunter22&x=1"]  # the real URL is what is scraped


async def test_stale_models_and_down_targets_lose_their_series(
    engine: tuple[Engine, str],
) -> None:
    state, base = engine
    clock = Clock()
    cfg = config(f"{base}/metrics", stale_after=30.0)
    src = source(cfg, clock)
    try:
        state.default = vllm_text(10.0, model="old")
        await src.poll()
        state.default = vllm_text(10.0, model="new")
        for _ in range(3):
            clock.now += 20.0
            result = await src.poll()
        assert token_models(result) == {"new"}
        state.default = "not an exposition {"
        for _ in range(3):
            clock.now += 20.0
            result = await src.poll()
        assert token_models(result) == set()
        assert metric(result, TARGET_UP, target=f"{base}/metrics") == 0.0
    finally:
        await src.close()


async def test_a_removed_target_takes_its_series_at_once(engine: tuple[Engine, str]) -> None:
    state, base = engine
    state.default = vllm_text(10.0)
    cfg = config(f"{base}/metrics")
    targets = TargetSet(static_targets(cfg), cfg.max_targets)
    src = source(cfg, Clock(), targets)
    try:
        assert token_models(await src.poll()) == {"m"}
        src.reconfigure(config())
        result = await src.poll()
    finally:
        await src.close()
    assert exposition(result) == []
    assert src._states == {}


async def test_model_name_churn_does_not_grow_memory(engine: tuple[Engine, str]) -> None:
    """The fast version of bench/serving/serving_churn.py: 1,200 scrapes of a new model name each,
    through several stale_after cycles; Python memory after warm-up stays flat."""
    import gc
    import tracemalloc

    state, base = engine
    count = iter(range(10**6))
    state.bodies = []
    state.default = ""

    async def churning() -> None:
        state.bodies.append(vllm_text(5e8, 1e8, model=f"model-{next(count)}"))

    clock = Clock()
    src = source(config(f"{base}/metrics", stale_after=50.0), clock)
    try:
        for _ in range(200):  # warm-up: caches, the first stale cycles
            await churning()
            await src.poll()
            clock.now += 1.0
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(1000):
            await churning()
            result = await src.poll()
            clock.now += 1.0
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    finally:
        await src.close()
    assert len(token_models(result)) <= 8
    assert grown < 256 * 1024, f"{grown} bytes kept after 1,000 churning scrapes"
