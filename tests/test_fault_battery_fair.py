"""Fault battery, fairness and exact counts ([fair], issue 39): one tenant's targets cannot
starve another's, every token a client received is counted once, and every value that
enters from outside passes a cap.

Each case drives the real part (the real serving source against engines on loopback, the
daemon as a subprocess, the config layers) through the hostile or careless input the
issue names, and asserts what the operator and the other tenants see.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import typing
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from pydantic import BaseModel
from structlog.testing import capture_logs

from exporter.cli import MAX_ENV_NAME_CHARS
from exporter.process import logdamp
from exporter.settings.section import MAX_SETTING_CHARS
from exporter.snapshot import SourceResult
from exporter.sources.kubernetes.config import KubernetesConfig
from exporter.sources.kubernetes.podlabels import PodLabelError, PodLabelSource
from exporter.sources.serving.accumulate import Ledger, Limits
from exporter.sources.serving.config import ServingConfig, ServingTarget
from exporter.sources.serving.pool import ScrapePool
from exporter.sources.serving.scrape import Outcome
from exporter.sources.serving.source import ServingSource
from exporter.sources.serving.targets import Target, TargetSet, merge_duplicates, static_targets
from exporter.web import healthcheck, webconfig
from exporter.wiring import config
from testkit.harness import DaemonProcess
from tests.support.serving import (
    TARGET_UP,
    TOKENS,
    ThreadEngine,
    exposition,
    inventory,
    make_source,
    metric,
    start,
    vllm_text,
)
from tests.test_fault_battery import REPO, ops_one_line_exit_2, ops_run

LIMITED = "goodput_serving_scrapes_limited_total"
BIG = "x" * 100_000
"""100 KB: what a careless template or a hostile value may put anywhere."""


# --- every value from outside is capped ---------------------------------------------------


def _sections(annotation: Any) -> list[type[BaseModel]]:
    """The settings sections an annotation holds (a section, an optional one, a list)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [s for arg in typing.get_args(annotation) for s in _sections(arg)]


def outside_settings(model: type[BaseModel] = config.Settings) -> Iterator[tuple[str, ...]]:
    """The path of every leaf setting, through nested sections and lists of them."""
    for name, field in model.model_fields.items():
        inner = _sections(field.annotation)
        if not inner:
            yield (name,)
        for section in inner:
            step = (name, "0") if typing.get_origin(field.annotation) is list else (name,)
            for rest in outside_settings(section):
                yield (*step, *rest)


def tree_of(path: tuple[str, ...], leaf: Any) -> Any:
    """The settings tree that sets ``path`` (list steps as one-item lists) to ``leaf``."""
    if not path:
        return leaf
    if path[0] == "0":
        return [tree_of(path[1:], leaf)]
    return {path[0]: tree_of(path[1:], leaf)}


def _refused_naming(exc: pytest.ExceptionInfo[config.ConfigError], path: tuple[str, ...]) -> None:
    text = str(exc.value)
    assert "\n" not in text and len(text) < 400, text[:400]
    assert ".".join(path) in text, text


SETTINGS = sorted(set(outside_settings()))


def test_the_enumeration_covers_every_string_setting() -> None:
    """Not a vacuous list: it reaches the nested target credentials and the top keys."""
    assert ("node_name",) in SETTINGS and ("listen",) in SETTINGS
    assert ("serving", "targets", "0", "authorization", "credentials_file") in SETTINGS
    assert ("serving", "annotation_prefix") in SETTINGS and len(SETTINGS) > 100


@pytest.mark.parametrize("path", SETTINGS, ids=".".join)
@pytest.mark.parametrize("layer", ["flag", "environment", "file"])
def test_every_setting_at_100kb_is_refused_naming_it(
    tmp_path: Path, path: tuple[str, ...], layer: str,
) -> None:
    """Each setting, from each layer, at 100 KB: one short line naming the key (before:
    serving.annotation_prefix, the credentials' file names, dict keys and more went
    through whole)."""
    values: list[Any] = [BIG, [BIG], {BIG: 1}] if layer == "flag" else [BIG]
    for value in values:
        tree = tree_of(path, value)
        with pytest.raises(config.ConfigError) as exc:
            if layer == "flag":
                config.build(tree, environ={})
            elif layer == "file":
                cfg = tmp_path / "c.yml"
                cfg.write_text(yaml.safe_dump(tree))
                config.build({}, environ={}, config_file=str(cfg))
            else:
                head, rest = path[0], path[1:]
                key = f"GOODPUT_{head.upper()}" + (f"__{rest[0].upper()}" if rest else "")
                inner = tree_of(rest[1:], value) if rest else value
                text = inner if isinstance(inner, str) else yaml.safe_dump(
                    inner, default_flow_style=True, width=10**9).strip()
                config.build({}, environ={key: text})
        assert path[0] in str(exc.value)
        if isinstance(value, str):
            _refused_naming(exc, path)


def test_a_long_list_of_short_values_is_refused() -> None:
    with pytest.raises(config.ConfigError, match=r"kubernetes\.resource_names"):
        config.build({"kubernetes": {"resource_names": ["a"] * 50_000}}, environ={})


def test_a_100kb_node_name_from_the_environment_is_one_line_and_exit_2() -> None:
    """$NODE_NAME bypassed the 253-character cap (a 13.2 MB /metrics for one GPU)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "NODE_NAME": BIG}
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", "--simulate-gpus", "1",
         "--listen", "127.0.0.1:0"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=30, check=False,
    )
    ops_one_line_exit_2(proc, "node_name", "$NODE_NAME")
    assert len(proc.stderr) < 400


def test_100kb_file_paths_are_one_line_and_exit_2() -> None:
    ops_one_line_exit_2(ops_run("--config", BIG), "config file path", str(MAX_SETTING_CHARS))
    ops_one_line_exit_2(ops_run("--web-config-file", BIG), "web config file path")
    env = {**os.environ, "PYTHONPATH": str(REPO), "GOODPUT_CONFIG": BIG}
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", "--listen", "127.0.0.1:0"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=30, check=False,
    )
    ops_one_line_exit_2(proc, "config file path")


def test_other_variables_read_from_outside_are_capped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The variables the exporter reads that are not settings: each at 100 KB is one short
    refusal, never echoed."""
    monkeypatch.setenv("GOODPUT_HEALTHCHECK_URL", "http://" + BIG)
    assert healthcheck.main([]) == 1
    assert len(capsys.readouterr().err) < 200
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", BIG)
    source = PodLabelSource(KubernetesConfig(), "n")
    with pytest.raises(PodLabelError) as refused:
        source._base_url()
    assert len(str(refused.value)) < 200


def test_a_100kb_variable_name_is_logged_cut() -> None:
    """An unknown ``GOODPUT_<100 KB>`` variable is named in the warning, cut (the daemon
    then stops at a taken port, right after that line)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(REPO), f"GOODPUT_{BIG}": "1"}
        proc = subprocess.run(
            [sys.executable, "-m", "exporter", "--simulate", "--listen", f"127.0.0.1:{port}"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=30, check=False,
        )
    warned = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    named = [w for w in warned if w["event"] == "environment_variables_ignored"]
    assert named and len(named[0]["names"][0]) == MAX_ENV_NAME_CHARS
    assert len(proc.stderr) < 2_000


# --- a refused reload is never damped into silence ----------------------------------------


def _refusals(text: str) -> tuple[int, list[dict[str, Any]]]:
    """Refusals the log shows: a line each (a summary is none itself), plus the refusals
    each line says were left out before it."""
    lines = [json.loads(line) for line in text.splitlines() if "config_reload_failed" in line]
    own = sum(1 for line in lines if "summary" not in line)
    return own + sum(int(line.get("suppressed", 0)) for line in lines), lines


def test_twenty_refused_reloads_in_ten_seconds_are_all_in_the_log(tmp_path: Path) -> None:
    """20 SIGHUPs with a bad config, one every 0.5 s: every refusal is in the log, as its
    own line or counted by a summary ("N more refusals"), with nothing after the last
    SIGHUP to carry it. Before: the damper kept 6 and wrote nothing for 3 minutes."""
    cfg, log = tmp_path / "c.yml", tmp_path / "log"
    cfg.write_text("interval: 1\n")
    daemon = DaemonProcess("--simulate", "--simulate-gpus", "1", "--config", str(cfg), log=log)
    daemon.start(timeout=30)
    assert daemon.proc is not None
    try:
        cfg.write_text("interval: fast\n")
        for _ in range(20):
            daemon.proc.send_signal(signal.SIGHUP)
            time.sleep(0.5)
        deadline = time.monotonic() + logdamp.SUBJECT_PERIOD + 10
        while _refusals(log.read_text())[0] < 20 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert daemon.proc.poll() is None
    finally:
        daemon.stop(timeout=15)
    seen, lines = _refusals(log.read_text())
    assert seen == 20, lines
    assert len(lines) < 20  # damped: the budget of docs/security.md still holds
    assert any(line.get("summary", "").endswith("more refusals") for line in lines)
    assert all("interval" in line["error"] for line in lines)


# --- one engine, one identity -------------------------------------------------------------


async def _poll_rounds(source: ServingSource, rounds: int) -> SourceResult:
    result = None
    for _ in range(rounds):
        result = await source.poll()
        await asyncio.sleep(0.05)
    assert result is not None
    return result


def _total(result: SourceResult) -> float:
    return sum(v for name, _, v in exposition(result) if name == TOKENS)


async def test_loopback_aliases_of_one_engine_are_counted_once() -> None:
    """``localhost``, ``127.0.0.1`` and ``[::1]`` for one engine: one target, one line
    saying so, its tokens once (before: 2,300 published where 1,400 were generated)."""
    engine = ThreadEngine(lambda n: vllm_text(100.0 * (n + 1), 10.0 * (n + 1)))
    port = engine.url.split(":")[2].split("/")[0]
    spellings = [engine.url, f"http://localhost:{port}/metrics", f"http://[::1]:{port}/metrics"]
    settings = config.build({"serving": {"extra_targets": spellings}}, environ={})
    with capture_logs() as logs:
        source = make_source(settings.section(ServingConfig))
    try:
        result = await _poll_rounds(source, 5)
    finally:
        await source.close()
        engine.close()
    merged = [e for e in logs if e["event"] == "serving_target_duplicate"]
    assert len(merged) == 2 and {e["same_as"] for e in merged} == {engine.url}
    assert len(source._states) == 1
    scraped = len(engine.queries)
    assert _total(result) == pytest.approx(110.0 * scraped)


async def test_two_engines_behind_one_proxy_both_run() -> None:
    """``?engine=a`` and ``?engine=b`` on one proxy: two targets, two labels, each its own
    tokens (before: one redacted label, and the daemon exited 2). ``?token=`` values stay
    secret."""
    seen: list[str] = []

    async def proxy(request: web.Request) -> web.Response:
        which = request.query.get("engine", "")
        seen.append(which)
        return web.Response(text=vllm_text(1000.0 if which == "a" else 50.0, model=which))

    app = web.Application()
    app.router.add_get("/metrics", proxy)
    runner, base = await start(app)
    wanted = [f"{base}/metrics?engine=a&token=s3cr3t-a", f"{base}/metrics?engine=b&token=s3cr3t-b"]
    settings = config.build({"serving": {"extra_targets": wanted}}, environ={})
    source = make_source(settings.section(ServingConfig))
    try:
        result = await _poll_rounds(source, 2)
    finally:
        await source.close()
        await runner.cleanup()
    up = {labels["target"]: v for name, labels, v in exposition(result) if name == TARGET_UP}
    assert up == {
        f"{base}/metrics?engine=a&token=<secret>": 1.0,
        f"{base}/metrics?engine=b&token=<secret>": 1.0,
    }
    assert {"a", "b"} <= set(seen)
    assert "s3cr3t" not in repr(exposition(result))
    assert metric(result, TOKENS, model="a", kind="generation") == 1000.0
    assert metric(result, TOKENS, model="b", kind="generation") == 50.0


# --- exact tokens for lazy series ---------------------------------------------------------


class EngineClock:
    """The source's clock and the engines' time in one: each poll is one second of both."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.seconds = 0

    def __call__(self) -> float:
        return self.now


def _lazy(seconds: int) -> float | None:
    """An engine at 100 tokens/s whose counter appears 4 s after it starts, at 512."""
    return None if seconds < 4 else 512.0 + 100.0 * (seconds - 4)


def _lazy_app(clock: EngineClock) -> web.Application:
    """llama.cpp at /llama (its model from /v1/models), vLLM at /vllm (one model), and a
    vLLM that names a new model on every scrape at /churn, its total 1e6 + 100/s."""

    async def llama(_: web.Request) -> web.Response:
        value = _lazy(clock.seconds)
        text = "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n"
        if value is not None:
            text += (f"# TYPE llamacpp:tokens_predicted_total counter\n"
                     f"llamacpp:tokens_predicted_total {value}\n"
                     f"# TYPE llamacpp:prompt_tokens_total counter\n"
                     f"llamacpp:prompt_tokens_total {value / 2}\n")
        return web.Response(text=text)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny"}]})

    async def vllm(_: web.Request) -> web.Response:
        value = _lazy(clock.seconds)
        text = ('# TYPE vllm:num_requests_running gauge\n'
                'vllm:num_requests_running{engine="0",model_name="big"} 1\n')
        if value is not None:
            text = vllm_text(value, value / 2, model="big")
        return web.Response(text=text)

    async def churn(_: web.Request) -> web.Response:
        return web.Response(text=vllm_text(1e6 + 100.0 * clock.seconds, model=f"m{clock.seconds}"))

    app = web.Application()
    for path, handler in (("/llama/metrics", llama), ("/v1/models", models),
                          ("/vllm/metrics", vllm), ("/churn/metrics", churn)):
        app.router.add_get(path, handler)
    return app


async def test_lazy_counters_count_from_zero_and_model_churn_adds_nothing() -> None:
    """Counters that appear 4 s after the engine starts, at 512 and growing, with
    llama.cpp and vLLM names: published = the engine's total at the last scrape (before:
    the first 512 were lost for good). In the same run, an engine naming a new model on
    every scrape at its whole count publishes no more than its own total."""
    clock = EngineClock()
    runner, base = await start(_lazy_app(clock))
    targets = [ServingTarget(url=f"{base}/{path}/metrics", gpus=[gpu])
               for path, gpu in (("llama", "0"), ("vllm", "1"), ("churn", "2"))]
    # Names of the churn expire after 2 s, so each is admitted again under the model cap.
    settings = ServingConfig(targets=targets, timeout=2.0, stale_after=2.0)
    source = ServingSource(settings, TargetSet(static_targets(settings)),
                           inventory=lambda: inventory(4), clock=clock)
    rows: dict[str, float] = {}
    counted = 0.0  # what Prometheus sums over the churn's rows (each new row from 0)
    try:
        for _ in range(12):
            result = await source.poll()
            for name, labels, v in exposition(result):
                if name == TOKENS and labels["gpu"] == "2" and labels["kind"] == "generation":
                    counted += v - rows.get(labels["model"], 0.0)
                    rows[labels["model"]] = v
            clock.now += 1.0
            clock.seconds += 1
    finally:
        await source.close()
        await runner.cleanup()
    last = clock.seconds - 1  # the engines' time at the last scrape
    engine_total = _lazy(last)
    assert metric(result, TOKENS, gpu="0", model="tiny", kind="generation") == engine_total
    assert metric(result, TOKENS, gpu="0", model="tiny", kind="prompt") == engine_total / 2
    assert metric(result, TOKENS, gpu="1", model="big", kind="generation") == engine_total
    assert metric(result, TOKENS, gpu="1", model="big", kind="prompt") == engine_total / 2
    assert len(rows) > 8  # names expired and were admitted again
    # The engine's own total, no more (each name counted at 1e6 would be 1.2e7).
    assert counted == 1e6 + 100.0 * last
    assert len(source._states) == 3


# --- fair scraping ------------------------------------------------------------------------


HUNG = 8
"""As many hung targets as serving.max_concurrency's default slots."""


async def _hung_app() -> tuple[web.AppRunner, str, asyncio.Event]:
    """An engine server whose every path hangs until released."""
    release = asyncio.Event()

    async def hang(_: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/{name}/metrics", hang)
    runner, base = await start(app)
    return runner, base, release


async def _scheduled(source: ServingSource, seconds: float) -> tuple[int, SourceResult]:
    """Poll at the source's interval, as the scheduler's fixed-rate loop does."""
    polls, result = 0, None
    deadline = time.monotonic() + seconds
    tick = time.monotonic()
    while time.monotonic() < deadline:
        result = await source.poll()
        polls += 1
        tick += source.interval
        await asyncio.sleep(max(tick - time.monotonic(), 0.0))
        tick = max(tick, time.monotonic() - source.interval)
    assert result is not None
    return polls, result


@pytest.mark.parametrize("tenants", [False, True], ids=["static", "pods"])
async def test_hung_targets_cannot_starve_an_honest_one(tenants: bool) -> None:
    """8 hung targets (timeout 10 s) beside one honest engine: the honest one is scraped on
    at least 90 % of the polls and published from the first. As pods: one tenant's 8 hung
    pods beside another tenant's honest pod. Before: 3 scrapes in 30 s, nothing published
    for the first 10 s."""
    honest = ThreadEngine(lambda n: vllm_text(10.0 * (n + 1)))
    runner, base, release = await _hung_app()
    urls_ = [f"{base}/hung{i}/metrics" for i in range(HUNG)] + [honest.url]
    settings = ServingConfig(extra_targets=urls_, timeout=10.0)
    targets = None
    if tenants:
        targets = [Target(u, namespace="greedy", pod=u.split("/")[3], origin="kubernetes")
                   for u in urls_[:-1]]
        targets.append(Target(honest.url, namespace="victim", pod="honest", origin="kubernetes"))
    source = make_source(settings, targets=targets)
    try:
        first = await source.poll()
        polls, result = await _scheduled(source, 8.0)
    finally:
        release.set()
        await source.close()
        await runner.cleanup()
        honest.close()
    polls += 1
    port = honest.url.split(":")[2].split("/")[0]
    name = f"victim/honest:{port}" if tenants else honest.url
    assert metric(first, TARGET_UP, target=name) == 1.0  # published from the first poll
    assert len(honest.queries) >= 0.9 * polls, (len(honest.queries), polls)
    cut = [metric(result, LIMITED, reason=r) or 0 for r in ("slow_share_full", "preempted")]
    assert sum(cut) > 0  # the hung paid, and it shows
    hung_up = [v for n, labels, v in exposition(result)
               if n == TARGET_UP and "hung" in labels["target"]]
    assert set(hung_up) <= {0.0}  # those cut are down; the others still run their 10 s


def test_one_namespace_cannot_take_every_place_under_max_targets() -> None:
    """40 annotated pods in one namespace listed first, one in another, 8 places: the
    other tenant's pod is scraped, and what was left out says why. Before: the first 8
    pods took every place."""
    greedy = [Target(f"http://10.0.0.{i}:8000/metrics", namespace="a-greedy", pod=f"p{i}",
                     origin="kubernetes") for i in range(40)]
    victim = Target("http://10.0.9.9:8000/metrics", namespace="z-victim", pod="v",
                    origin="kubernetes")
    found = TargetSet(max_targets=8, per_namespace=12)
    found.set_discovered([*greedy, victim])
    scraped = found()
    assert victim in scraped and len(scraped) == 8
    assert found.dropped["max_targets_per_namespace"] == 28  # 40 - 12
    assert found.dropped["max_targets"] == 5  # 12 + 1 - 8


def test_host_names_that_resolve_alike_are_one_target_and_lookups_are_rare() -> None:
    """Resolved when the settings are read, and only for hosts that share the rest of
    their URL with another target."""
    asked: list[str] = []

    def look_up(host: str) -> frozenset[str]:
        asked.append(host)
        return frozenset({"10.0.0.5"}) if host in ("engine", "engine.ns.svc") else frozenset()

    listed = [Target("http://engine:8000/metrics"), Target("http://engine.ns.svc:8000/metrics"),
              Target("http://10.0.0.5:8000/metrics"), Target("http://other:9000/metrics"),
              Target("http://engine:8000/metrics?engine=b")]
    kept = merge_duplicates(listed, look_up)
    assert [t.url for t in kept] == [listed[0].url, listed[3].url, listed[4].url]
    assert sorted(asked) == ["engine", "engine.ns.svc"]


# --- the high-water mark, reading by reading ----------------------------------------------


def _count(ledger: Ledger, readings: list[dict[str, float]]) -> float:
    counted, now = 0.0, 0.0
    for reading in readings:
        values = ledger.relabel({("generation_tokens", m, ""): v for m, v in reading.items()},
                                "", now)
        step = ledger.step(values, counters=["generation_tokens"], now=now, gpus=lambda _k: 1)
        counted += sum(step.deltas.values())
        now += 1.0
    return counted


def test_a_lazy_series_beside_a_growing_one_counts_exactly() -> None:
    readings = [{"a": 1000.0}, {"a": 1100.0, "b": 50.0}, {"a": 1200.0, "b": 80.0}]
    assert _count(Ledger(Limits()), readings) == 1280.0


def test_names_that_come_and_go_never_pass_the_engines_highest_total() -> None:
    """{m0}, {m0, m1}, {m1}, {m1, m2}, ... each at 1e6: the engine's total never passes
    2e6, and neither does what is counted."""
    readings = [{f"m{i // 2}": 1e6} if i % 2 == 0 else {f"m{i // 2}": 1e6, f"m{i // 2 + 1}": 1e6}
                for i in range(40)]
    ledger = Ledger(Limits(max_models=1000))
    assert _count(ledger, readings) == 2e6
    assert ledger.dropped["new_series"] > 0


def test_a_counter_reset_starts_the_mark_again() -> None:
    """A counter that goes down (an unseen restart) counts its new value, and a series
    that appears after it counts from 0."""
    readings = [{"a": 5000.0}, {"a": 10.0}, {"a": 20.0, "b": 30.0}]
    assert _count(Ledger(Limits()), readings) == 5000.0 + 10.0 + 10.0 + 30.0


async def test_the_pool_moves_a_slow_scrape_to_the_slow_share_or_cuts_it() -> None:
    """One slot in all: a lone slow engine is still scraped. Four slots: two slow scrapes
    run on, the third is cut at its overrun and counted, and a fast one still runs."""
    target = Target("http://127.0.0.1:9/metrics")

    def outcome(seconds: float) -> Callable[[], Awaitable[Outcome]]:
        async def scrape() -> Outcome:
            await asyncio.sleep(seconds)
            return Outcome(target, seconds, reason="ok")
        return scrape

    def cut(reason: str, error: str) -> Outcome:
        return Outcome(target, 0.05, None, reason, error)

    alone = await ScrapePool(1).run(outcome(0.2), key="a", tenant="a", long=False,
                                    overrun=0.05, cut=cut)
    assert alone.reason == "ok"
    pool = ScrapePool(4)
    runs = [pool.run(outcome(s), key=f"s{i}", tenant=f"s{i}", long=False, overrun=0.05,
                     cut=cut) for i, s in enumerate((0.3, 0.3, 0.3))]
    slow = asyncio.gather(*runs)
    await asyncio.sleep(0.1)
    fast = await pool.run(outcome(0.01), key="f", tenant="f", long=False, overrun=0.05,
                          cut=cut)
    reasons = sorted(o.reason for o in await slow)
    assert reasons == ["ok", "ok", "slow_share_full"] and fast.reason == "ok"
    assert pool.limited == {"slow_share_full": 1, "preempted": 0, "queued": 0,
                            "max_targets": 0}


async def test_a_cancelled_scrape_leaves_nothing_running() -> None:
    """Closing the source cancels its scrape tasks: the scrape inside goes with them and
    its slot comes back."""
    target = Target("http://127.0.0.1:9/metrics")
    started, stopped = asyncio.Event(), asyncio.Event()

    async def scrape() -> Outcome:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            stopped.set()
        return Outcome(target, 60.0)

    pool = ScrapePool(2)
    outer = asyncio.ensure_future(pool.run(
        scrape, key="t", tenant="t", long=False, overrun=30.0,
        cut=lambda r, e: Outcome(target, 0.0, None, r, e)))
    await started.wait()
    outer.cancel()
    await asyncio.gather(outer, return_exceptions=True)
    await asyncio.wait_for(stopped.wait(), 1.0)
    assert pool._holding() == 0


@pytest.mark.parametrize("tree", [
    {"http_server_config": {"headers": {"X-Note": BIG}}},
    {"basic_auth_users": {BIG: "x"}},
    {"tls_server_config": {"cert_file": BIG, "key_file": "k"}},
], ids=["header", "user", "cert_path"])
def test_a_100kb_web_config_value_is_one_line(tmp_path: Path, tree: dict[str, Any]) -> None:
    path = tmp_path / "w.yml"
    path.write_text(yaml.safe_dump(tree, width=10**9))
    with pytest.raises(webconfig.WebConfigError) as refused:
        webconfig.load(str(path))
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 400
    assert str(MAX_SETTING_CHARS) in str(refused.value)
