"""A real llama-server (built from source, CPU, tiny random model) scraped by the real daemon.

Clients drive ``/completion`` requests and sum the token counts llama-server returns to
them; the exporter, scraping llama-server's /metrics every second on the simulated node,
must publish exactly those totals, also after llama-server restarts on the same port (the
old process's tokens stay counted, the new one's are added). The daemon scrapes through a
pass-through gate (tests/support/llamacpp.py ``MetricsGate``) the test shuts across the
restart, so the restart is always one the counters alone cannot reveal.

The first run builds llama-server (minutes; cached outside the repo, see
tests/support/llamacpp.py). Skipped only where no compiler or cmake exists.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.harness import http_get
from tests.support.daemon import daemon
from tests.support.llamacpp import (
    BuildUnavailable,
    LlamaServer,
    MetricsGate,
    llama_server,
    server_binary,
    write_tiny_gguf,
)

pytestmark = pytest.mark.integration

PREFIX = "the gpu cache is a token of the cache and the gpu is in it " * 3
"""A shared prompt prefix: repeated prompts reuse it from a slot's cache."""

N_PREDICT = 12
KINDS = ("generation", "prompt", "prompt_cached")


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        return server_binary()
    except BuildUnavailable as exc:
        pytest.skip(f"cannot build llama-server: {exc}")


@pytest.fixture
def server(binary: Path, tmp_path: Path) -> Iterator[LlamaServer]:
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    with llama_server(binary, model, tmp_path / "llama-server.log") as running:
        yield running


def drive(server: LlamaServer, sums: Counter[str], batches: int = 3) -> None:
    """Concurrent requests with distinct suffixes (parallel slots), then the same prompt
    again and again (prompt cache hits); adds what llama-server told the clients."""
    prompts = [f"{PREFIX}{i}" for i in range(batches * 4)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda p: server.completion(p, N_PREDICT, **OPTIONS), prompts))
    results += [server.completion(PREFIX, N_PREDICT, **OPTIONS) for _ in range(3)]
    for result in results:
        add(sums, result)


OPTIONS: dict[str, Any] = {"cache_prompt": True, "ignore_eos": True, "temperature": 0.0}


def add(sums: Counter[str], result: dict[str, Any]) -> None:
    timings = result["timings"]
    cached = int(timings.get("cache_n", 0))
    evaluated = int(result["tokens_evaluated"])
    assert int(timings["prompt_n"]) == evaluated - cached, result
    sums["generation"] += int(result["tokens_predicted"])
    sums["prompt"] += evaluated - cached
    sums["prompt_cached"] += cached


def exporter_tokens(url: str) -> dict[str, float]:
    """goodput_gpu_tokens_total by kind, summed over GPUs, models and node level."""
    status, text = http_get(url + "/metrics", timeout=5.0)
    assert status == 200
    found: dict[str, float] = dict.fromkeys(KINDS, 0.0)
    for family in text_string_to_metric_families(text):
        if family.name != "goodput_gpu_tokens":
            continue
        for sample in family.samples:
            if sample.name == "goodput_gpu_tokens_total":
                kind = sample.labels["kind"]
                found[kind] = found.get(kind, 0.0) + sample.value
    return found


def wait_down(url: str, timeout: float = 30.0) -> None:
    """Poll the exporter until its serving target reads down (a scrape failed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, text = http_get(url + "/metrics", timeout=5.0)
        up = [s.value for f in text_string_to_metric_families(text) for s in f.samples
              if s.name == "goodput_serving_target_up"]
        if up == [0.0]:
            return
        time.sleep(0.2)
    raise AssertionError("the exporter never saw the shut gate")


def wait_equal(url: str, want: Counter[str], timeout: float = 30.0) -> None:
    """Poll the exporter until its totals equal ``want`` (the serving scrape runs every
    second); fails with the last totals seen."""
    deadline = time.monotonic() + timeout
    got: dict[str, float] = {}
    while time.monotonic() < deadline:
        got = exporter_tokens(url)
        if all(got[kind] == want[kind] for kind in KINDS):
            return
        time.sleep(0.2)
    raise AssertionError(f"exporter totals {got} != clients' {dict(want)}")


def test_exporter_totals_equal_clients_across_restart(server: LlamaServer, tmp_path: Path) -> None:
    log = tmp_path / "exporter.log"
    with MetricsGate(server.url) as gate, daemon(
        "--simulate", "--simulate-gpus", "2", "--serving-target", gate.url + "/metrics",
        log=log,
    ) as exporter:  # fmt: skip
        sums: Counter[str] = Counter()
        drive(server, sums, batches=1)
        assert sums["generation"] == 7 * N_PREDICT
        assert sums["prompt_cached"] > 0, "the repeated prompt was never served from cache"
        wait_equal(exporter, sums)

        # The new process makes more tokens than the old one did, and the exporter sees
        # none of it until then (the gate is shut): no counter goes down between two of its
        # readings, so only the Process-Start-Time-Unix header shows the restart (the old
        # process's counts must stay).
        before = Counter(sums)
        gate.open.clear()
        wait_down(exporter)  # the exporter has seen the gap (a start-time change between
        server.restart()     # good scrapes with no counter down is flapping, not a restart)
        drive(server, sums, batches=3)
        assert sums["generation"] == (7 + 15) * N_PREDICT
        assert all(sums[k] - before[k] > before[k] for k in KINDS), (before, sums)
        gate.open.set()
        wait_equal(exporter, sums)
    assert "serving_target_restarted" in log.read_text()
