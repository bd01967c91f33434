"""Generated tokens stay exact on a real llama-server, with and without speculative decoding.

With drafting, one decode call of the target model yields several tokens per slot, so the
live estimate (decode calls x busy slots per call) counts only a fraction of them; the
draft tokens the engine accepted make up the rest, and once the server is idle the exporter
must publish exactly what ``/completion`` told the clients. The tiny random GGUF is its own
draft model (greedy sampling: the draft is always right, so nearly every draft token is
accepted). Built once and cached like tests/serving/test_llamacpp_real.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.harness import http_get
from tests.support.daemon import daemon
from tests.support.llamacpp import (
    BuildUnavailable,
    LlamaServer,
    llama_server,
    server_binary,
    write_tiny_gguf,
)

pytestmark = pytest.mark.integration

N_PREDICT = 40
OPTIONS = {"cache_prompt": True, "ignore_eos": True, "temperature": 0.0}
SPEC = ("--spec-type", "draft-simple", "--spec-draft-n-max", "8")


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        return server_binary()
    except BuildUnavailable as exc:
        pytest.skip(f"cannot build llama-server: {exc}")


@pytest.fixture(params=[False, True], ids=["plain", "drafting"])
def server(request: pytest.FixtureRequest, binary: Path, tmp_path: Path) -> Iterator[LlamaServer]:
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    args = (*SPEC, "-md", str(model)) if request.param else ()
    with llama_server(binary, model, tmp_path / "llama-server.log", *args) as running:
        yield running


def engine_counters(server: LlamaServer) -> dict[str, float]:
    text, _ = server.metrics()
    return {
        sample.name.removeprefix("llamacpp:"): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def published_generation(url: str) -> float:
    status, text = http_get(url + "/metrics", timeout=5.0)
    assert status == 200
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "goodput_gpu_tokens"
        for sample in family.samples
        if sample.name == "goodput_gpu_tokens_total" and sample.labels["kind"] == "generation"
    )


def test_generated_total_equals_clients_sum(server: LlamaServer, tmp_path: Path) -> None:
    drafting = "--spec-type" in server.args
    with daemon(
        "--simulate", "--simulate-gpus", "2", "--serving-target", server.url + "/metrics",
        log=tmp_path / "exporter.log",
    ) as exporter:  # fmt: skip
        clients = 0
        for batch in range(2):
            prompts = [f"the gpu cache {batch} {i}" for i in range(4)]
            with ThreadPoolExecutor(4) as pool:
                results = list(
                    pool.map(lambda p: server.completion(p, N_PREDICT, **OPTIONS), prompts)
                )
            clients += sum(int(result["tokens_predicted"]) for result in results)
        assert clients == 8 * N_PREDICT
        engine = engine_counters(server)
        assert engine["requests_processing"] == 0
        estimate = round(engine["n_decode_total"] * engine["n_busy_slots_per_decode"])
        accepted = engine.get("spec_decode_num_accepted_tokens_total", 0.0)
        if drafting:
            # The drafts did the work: the estimate alone is far from the truth.
            assert accepted > clients / 2, engine
            assert estimate < clients / 2, engine
        else:
            assert accepted == 0, engine
        deadline = time.monotonic() + 30.0
        got = published_generation(exporter)
        while got != clients and time.monotonic() < deadline:
            time.sleep(0.2)
            got = published_generation(exporter)
        assert got == clients, (got, clients, engine)
