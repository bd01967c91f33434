"""Fault battery, fairness by construction ([fair-2], issue 48): a tenant's slow or hung
pods cannot black out an honest engine, and places under ``max_targets`` rotate.

Each case runs the real serving source against engines on loopback (hung, slow or
honest aiohttp and threaded HTTP servers), with pods built by discovery's own
``pod_target`` from pod objects as the kubelet's API would list them, polled at the
source's interval as the daemon's scheduler does. Intervals and timeouts are short so the
suite stays quick on two shared cores; what is asserted is a share of rounds, not a time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from exporter.snapshot import SourceResult
from exporter.sources.serving.config import ServingConfig
from exporter.sources.serving.discovery import pod_target
from exporter.sources.serving.source import ServingSource
from exporter.sources.serving.targets import Target, TargetSet
from exporter.wiring import config
from testkit.harness import DaemonProcess
from tests.conftest import REPO
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

LIMITED = "goodput_serving_scrapes_limited_total"
WAIT = "goodput_serving_scrape_wait_seconds"
PREFIX = "serving.goodput.dev/"
NODE = "node-a"


def pod(namespace: str, name: str, base: str, path: str) -> Target:
    """The target discovery makes of an annotated pod on this node (pod IP loopback)."""
    host, port = base.removeprefix("http://").split(":")
    notes = {PREFIX + "scrape": "true", PREFIX + "port": port, PREFIX + "path": path,
             PREFIX + "engine": "vllm"}
    found = pod_target(SimpleNamespace(
        metadata=SimpleNamespace(annotations=notes, namespace=namespace, name=name,
                                 deletion_timestamp=None),
        spec=SimpleNamespace(node_name=NODE, containers=[]),
        status=SimpleNamespace(phase="Running", pod_ip=host),
    ), NODE, PREFIX)
    assert found is not None and not found.invalid
    return found


async def engines(
    delay: Callable[[str], float], release: asyncio.Event
) -> tuple[web.AppRunner, str, Counter[str]]:
    """One server for many pods: ``/<name>/metrics`` answers after ``delay(name)``
    seconds (hangs until ``release`` when negative); ``seen`` counts requests per name."""
    seen: Counter[str] = Counter()

    async def metrics(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        seen[name] += 1
        wait = delay(name)
        if wait < 0:
            await release.wait()
        else:
            await asyncio.sleep(wait)
        return web.Response(text=vllm_text(10.0 * seen[name]))

    app = web.Application()
    app.router.add_get("/{name}/metrics", metrics)
    runner, base = await start(app)
    return runner, base, seen


def source(config: ServingConfig, targets: TargetSet) -> ServingSource:
    devices = inventory(2)
    return ServingSource(config, targets, inventory=lambda: devices)


async def scheduled(src: ServingSource, seconds: float) -> tuple[int, list[SourceResult]]:
    """Poll at the source's interval for ``seconds``, as the daemon's fixed-rate loop;
    returns the rounds the interval asked for (a poll that overran skips a round, as the
    daemon's loop does) and the results."""
    results: list[SourceResult] = []
    deadline = time.monotonic() + seconds
    tick = time.monotonic()
    while time.monotonic() < deadline:
        results.append(await src.poll())
        tick += src.interval
        await asyncio.sleep(max(tick - time.monotonic(), 0.0))
        tick = max(tick, time.monotonic() - src.interval)
    return round(seconds / src.interval), results


def limited(result: SourceResult) -> dict[str, float]:
    return {labels["reason"]: v for n, labels, v in exposition(result) if n == LIMITED}


async def test_an_engine_slow_once_keeps_its_scrapes_next_to_60_hung_pods() -> None:
    """60 pods in 15 namespaces that hang for the whole timeout, and an honest engine in
    a namespace of its own whose /metrics takes 0.7 s once (a busy vLLM): after the first
    second (every tenant, having used nothing, is served once first) the honest one is
    scraped on at least 90 % of the rounds and never published down. Before: 7 of 30,
    then none for 21 s while the hung pods held the slow share first-come."""
    release = asyncio.Event()
    runner, base, seen = await engines(lambda name: -1.0, release)
    def honest_body(n: int) -> str:
        if n == 6:
            time.sleep(0.7)
        return vllm_text(100.0 * (n + 1))

    honest = ThreadEngine(honest_body)
    hung = [pod(f"tenant-{i % 15:02d}", f"hung-{i}", base, f"/hung{i}/metrics")
            for i in range(60)]
    mine = pod("honest", "engine", honest.url.removesuffix("/metrics"), "/metrics")
    targets = TargetSet(max_targets=64, per_namespace=16)
    targets.set_discovered([*hung, mine])
    src = source(ServingConfig(interval=0.5, timeout=2.0), targets)
    try:
        await scheduled(src, 1.0)  # the first rounds serve every tenant once
        before = len(honest.queries)
        rounds, results = await scheduled(src, 10.0)
    finally:
        release.set()
        await src.close()
        await runner.cleanup()
        honest.close()
    assert len(honest.queries) - before >= 0.9 * rounds, (len(honest.queries), before, rounds)
    ups = [metric(r, TARGET_UP, target=mine.name) for r in results]
    assert ups.count(0.0) == 0, ups
    assert sum(seen.values()) > 0  # the hung pods were asked, and paid for it:
    cut = limited(results[-1])
    assert cut["slow_share_full"] + cut["preempted"] > 0, cut


async def test_an_always_slow_engine_keeps_what_it_gets_alone_next_to_16_hung_pods() -> None:
    """An engine whose /metrics always takes 0.7 s, scraped by two sources at once: one
    with it alone, one with it next to 16 pods of four other tenants that hang for the
    timeout. Next to them it keeps at least 90 % of the scrapes it gets alone (counted
    after the first second, which waits for every new target). Before: 1 of 30 scrapes
    next to them, 15 of 30 alone."""
    release = asyncio.Event()
    runner, base, seen = await engines(lambda name: 0.7 if name.startswith("slow") else -1.0,
                                       release)
    hung = [pod(f"greedy-{i % 4}", f"hung-{i}", base, f"/hung{i}/metrics") for i in range(16)]
    config = ServingConfig(interval=0.5, timeout=2.0)
    sources = []
    for name, crowd in (("slow-alone", []), ("slow", hung)):
        targets = TargetSet(max_targets=64, per_namespace=16)
        targets.set_discovered([*crowd, pod("honest", name, base, f"/{name}/metrics")])
        sources.append(source(config, targets))

    try:
        await asyncio.gather(*(scheduled(src, 1.0) for src in sources))
        start_counts = (seen["slow-alone"], seen["slow"])
        await asyncio.gather(*(scheduled(src, 10.0) for src in sources))
    finally:
        release.set()
        for src in sources:
            await src.close()
        await runner.cleanup()
    alone = seen["slow-alone"] - start_counts[0]
    crowded = seen["slow"] - start_counts[1]
    assert alone >= 5, (alone, crowded)
    assert crowded >= 0.9 * alone, (alone, crowded)


async def test_60_pods_at_300ms_leave_honest_targets_their_scrapes_and_show_the_wait() -> None:
    """60 pods of one tenant that each answer in 0.3 s (just under the slow limit) and two
    honest configured engines: the honest ones are scraped on at least 90 % of the rounds,
    and the tenant's own shortfall shows: its scrapes wait (``scrape_wait_seconds``) and
    the rounds they miss count as ``queued``. Before: the honest ones got 5-16 of 30 and
    every counter stayed 0."""
    release = asyncio.Event()
    runner, base, _ = await engines(lambda name: 0.3, release)
    busy = [pod("busy", f"p{i}", base, f"/p{i}/metrics") for i in range(60)]
    honest = [ThreadEngine(lambda n: vllm_text(10.0 * (n + 1))) for _ in range(2)]
    config = ServingConfig(extra_targets=[e.url for e in honest], interval=0.5, timeout=2.0,
                           max_targets=64, max_targets_per_namespace=64)
    targets = TargetSet([Target(e.url, origin="flag") for e in honest], 64, 64)
    targets.set_discovered(busy)
    src = source(config, targets)
    try:
        rounds, results = await scheduled(src, 6.0)
    finally:
        release.set()
        await src.close()
        await runner.cleanup()
        for engine in honest:
            engine.close()
    for engine in honest:
        assert len(engine.queries) >= 0.9 * rounds, ([len(e.queries) for e in honest], rounds)
    last = results[-1]
    assert limited(last)["queued"] > 0
    waits = {labels["target"]: v for n, labels, v in exposition(last) if n == WAIT}
    assert max(waits[t.name] for t in busy if t.name in waits) > 0.1
    assert all(waits[e.url] < 0.5 for e in honest), waits


async def test_72_namespaces_under_max_targets_64_all_take_turns() -> None:
    """72 namespaces of one pod each, 64 places: every namespace is scraped, none waits
    more than a few rounds, and a pod that waits its turn keeps its count (published =
    its engine's total at its last scrape, never counted twice). Before: the 8 that sort
    last were never scraped."""
    release = asyncio.Event()
    runner, base, seen = await engines(lambda name: 0.0, release)
    pods = [pod(f"ns-{i:02d}", "engine", base, f"/e{i}/metrics") for i in range(72)]
    targets = TargetSet(max_targets=64, per_namespace=16)
    targets.set_discovered(pods)
    src = source(ServingConfig(interval=0.5, timeout=2.0, max_targets=64), targets)
    asked: dict[str, list[int]] = {}
    try:
        for round_ in range(18):
            before = Counter(seen)
            result = await src.poll()
            for name in seen:
                if seen[name] > before[name]:
                    asked.setdefault(name, []).append(round_)
        await asyncio.sleep(0.1)
        result = await src.poll()
    finally:
        release.set()
        await src.close()
        await runner.cleanup()
    assert sorted(asked) == sorted(f"e{i}" for i in range(72))
    for name, rounds in asked.items():
        gaps = [b - a for a, b in zip([-1, *rounds], [*rounds, 18], strict=True)]
        assert max(gaps) <= 3, (name, rounds)
    assert (limited(result)["max_targets"]) > 0
    # Each pod's engine counts 10 tokens per request: what was published is that, once.
    published = sum(v for n, labels, v in exposition(result)
                    if n == TOKENS and labels["kind"] == "generation")
    assert published == 10.0 * sum(seen.values())


# --- a refused reload is never lost to the byte budget ------------------------------------


def _reload_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()
            if '"config_reload' in line or '"config_reloaded"' in line]


def test_kilobyte_refusals_are_summarized_with_their_times_before_the_next_success(
    tmp_path: Path,
) -> None:
    """Three refused reloads whose log line is ~3 KB of JSON (an unknown key of 600
    non-ASCII characters), then a good config: every refusal is in the log, as its own
    line or in a summary carrying when the first and last were refused, and that summary
    comes before ``config_reloaded``, not seconds after it. Before: the byte budget
    dropped them with no summary and the log's last word was ``config_reloaded``."""
    cfg, log = tmp_path / "c.yml", tmp_path / "log"
    cfg.write_text("interval: 1\n")
    daemon = DaemonProcess("--simulate", "--simulate-gpus", "1", "--config", str(cfg), log=log)
    daemon.start(timeout=30)
    assert daemon.proc is not None
    try:
        cfg.write_text('? "' + "é" * 600 + '"\n: 1\n', encoding="utf-8")
        for _ in range(3):
            daemon.proc.send_signal(signal.SIGHUP)
            time.sleep(0.3)
        cfg.write_text("interval: 1\n")
        daemon.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "config_reloaded" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        daemon.stop(timeout=15)
    lines = _reload_lines(log.read_text())
    events = [line["event"] for line in lines]
    assert "config_reloaded" in events, events
    before = lines[: events.index("config_reloaded")]
    refusals = [line for line in before if line["event"] == "config_reload_failed"]
    shown = sum(1 for line in refusals if "summary" not in line)
    shown += sum(int(line.get("suppressed", 0)) for line in refusals)
    assert shown == 3, refusals
    summaries = [line for line in refusals if "summary" in line]
    assert summaries, refusals  # the budget did drop some: said, with when
    assert all(s["first_refused_at"] <= s["last_refused_at"] for s in summaries)


@pytest.mark.parametrize("flag", ["--log-level", "--interval", "--simulate-gpus",
                                  "--listen", "--no-such-flag"])
def test_every_flag_value_is_capped_before_it_is_echoed(flag: str) -> None:
    """A 100 KB value of any flag is refused in one short line (before: argparse
    repeated the whole value to stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", flag, "x" * 100_000, "--simulate"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
        text=True, timeout=30, check=False,
    )
    assert proc.returncode == 2, proc.stderr[:300]
    assert len(proc.stderr) < 500 and proc.stderr.count("\n") == 1, proc.stderr[:500]


# --- one engine, one identity; secrets after percent-decoding -----------------------------


async def test_ipv4_mapped_dotted_and_fqdn_loopback_spellings_are_one_engine() -> None:
    """``127.0.0.1``, ``[::ffff:127.0.0.1]``, ``127.1`` and ``LOCALHOST.`` reach one
    engine: one target, its tokens once (before: the mapped and FQDN spellings were
    scraped and counted again)."""
    engine = ThreadEngine(lambda n: vllm_text(100.0 * (n + 1)))
    port = engine.url.split(":")[2].split("/")[0]
    spellings = [engine.url, f"http://[::ffff:127.0.0.1]:{port}/metrics",
                 f"http://127.1:{port}/metrics", f"http://LOCALHOST.:{port}/metrics"]
    settings = config.build({"serving": {"extra_targets": spellings}}, environ={})
    src = make_source(settings.section(ServingConfig))
    try:
        for _ in range(3):
            result = await src.poll()
    finally:
        await src.close()
        engine.close()
    assert len(src._states) == 1
    assert metric(result, TOKENS, kind="generation") == 100.0 * len(engine.queries)
    assert src._states[next(iter(src._states))].target.is_local


async def test_a_percent_encoded_secret_name_never_reaches_a_label() -> None:
    """``?%74oken=abc`` is ``?token=abc`` to the engine: its value is ``<secret>`` in the
    ``target`` label as in the log (before: the label showed it)."""
    engine = ThreadEngine(lambda n: vllm_text(1.0))
    url = engine.url + "?%74oken=abc-s3cr3t&x=1"
    src = make_source(ServingConfig(extra_targets=[url]))
    try:
        result = await src.poll()
    finally:
        await src.close()
        engine.close()
    assert "abc-s3cr3t" not in repr(exposition(result))
    assert metric(result, TARGET_UP, target=engine.url + "?%74oken=<secret>&x=1") == 1.0
    assert engine.queries == ["/metrics?token=abc-s3cr3t&x=1"]  # what the engine reads
