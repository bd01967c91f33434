"""Fault battery, exporter side ([hardening]): each case drives the real daemon through one
fault and asserts what the user sees (a metric with a reason) and that nothing else was lost.

Engine, kubelet and profiling faults live with their sources' tests (tests/serving,
tests/kubernetes, tests/test_gpm_source.py, tests/test_dcgm_source.py); this file holds the
faults of the daemon as a whole: a GPU lost mid-run, a scrape storm with slow clients,
SIGTERM in the middle of a request, SIGHUP with a good and a bad new config, secrets in a
target URL and a malformed static target URL. The hostile engines of issue 22 (model-name
churn, 1e18/1e308/Inf counters, start-time flapping, duplicate spellings, discovered bad
URLs, target caps) are in tests/serving/test_trust.py, test_truth.py and the property tests
of tests/serving/test_accumulate.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from exporter import config
from exporter.daemon import Daemon, build
from exporter.sim.fake_nvml import FakeGpu, FakeNvml
from exporter.sim.patterns import NODE
from exporter.sim.physics import GpuPhysics
from exporter.sources.nvml_session import NvmlSession
from tests.conftest import REPO
from tests.support.prometheus import free_port, wait_http

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float | None:
    for (n, lbls), v in found.items():
        if n == name and all(dict(lbls).get(k) == want for k, want in labels.items()):
            return v
    return None


@contextlib.asynccontextmanager
async def running(daemon: Daemon) -> AsyncIterator[str]:
    runner = web.AppRunner(daemon.app())
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def scrape(url: str) -> Samples:
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as response:
        assert response.status == 200
        return samples(await response.text())


async def until(url: str, check: Callable[[Samples], bool], timeout: float = 20.0) -> Samples:
    deadline = time.monotonic() + timeout
    while True:
        found = await scrape(url)
        if check(found):
            return found
        assert time.monotonic() < deadline, "condition not met before the deadline"
        await asyncio.sleep(0.1)


def node(lost_after: float | None) -> NvmlSession:
    """Three simulated GPUs; GPU 1 falls off the bus ``lost_after`` seconds after start."""
    workloads = [w for w in NODE if w.name in ("compute_gemm", "memory_decode", "launch_bound")]
    gpus = [
        FakeGpu(
            index=i,
            physics=GpuPhysics(w.pattern, start=time.monotonic()),
            processes=list(w.processes),
            lost_after=lost_after if i == 1 else None,
        )
        for i, w in enumerate(workloads)
    ]
    session = NvmlSession(FakeNvml(gpus), "simulated")
    session.open()
    return session


def settings(**extra: object) -> config.Settings:
    return config.build({"interval": 0.2, "node_name": "faulty", **extra}, environ={})


async def test_gpu_lost_mid_run_costs_that_gpu_only() -> None:
    daemon = build(settings(profiling={"mode": "off"}), node(lost_after=1.5))
    async with running(daemon) as url:
        before = await until(url, lambda s: value(s, "goodput_gpu_up", gpu="1") == 1.0)
        energy_0 = value(before, "goodput_gpu_energy_joules_total", gpu="0")
        after = await until(url, lambda s: value(s, "goodput_gpu_up", gpu="1") == 0.0)
        assert value(after, "goodput_gpu_up", gpu="1", reason="gpu_lost") == 0.0
        for gpu in ("0", "2"):
            assert value(after, "goodput_gpu_up", gpu=gpu, reason="") == 1.0
        # The other GPUs keep being read: their energy counters still move.
        moved = await until(
            url,
            lambda s: (value(s, "goodput_gpu_energy_joules_total", gpu="0") or 0.0)
            > (energy_0 or 0.0),
        )
        assert value(moved, "goodput_gpu_utilization_seconds_total", gpu="2") is not None
        # And the model stops claiming a regime for the lost GPU.
        await until(url, lambda s: value(s, "goodput_gpu_regime", gpu="1", regime="unknown") == 1)


async def test_scrape_storm_with_slow_clients_loses_no_scrape() -> None:
    """50 concurrent scrapers while 20 clients hold connections open, sending their request
    one byte at a time: every scrape is answered completely (latency is bench/'s job)."""
    daemon = build(settings(profiling={"mode": "off"}), node(lost_after=None))
    async with running(daemon) as url:
        await until(url, lambda s: value(s, "goodput_gpu_up", gpu="0") == 1.0)
        port = int(url.rsplit(":", 1)[1])
        stop = asyncio.Event()

        async def slow_client() -> None:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n":
                    if stop.is_set():
                        return
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(0.05)
            except ConnectionError:
                return  # the server may drop a client that is too slow: that is allowed
            finally:
                writer.close()

        async def scraper(http: aiohttp.ClientSession) -> int:
            ok = 0
            for _ in range(5):
                async with http.get(url + "/metrics") as response:
                    body = await response.text()
                    assert response.status == 200
                    assert value(samples(body), "goodput_gpu_up", gpu="2") == 1.0
                    ok += 1
            return ok

        slow = [asyncio.create_task(slow_client()) for _ in range(20)]
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            done = await asyncio.gather(*(scraper(http) for _ in range(50)))
        stop.set()
        await asyncio.gather(*slow, return_exceptions=True)
        assert sum(done) == 250


def test_sigterm_during_a_request_exits_cleanly() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--simulate", "--simulate-gpus", "2",
         "--listen", f"127.0.0.1:{port}"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", timeout=30)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers not finished
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out.decode()
    assert b'"event": "stopped"' in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "0"], "interval"),
        (["--profiling", "sometimes"], "profiling"),
        (["--listen", "nowhere"], "listen"),
    ],
)
def test_config_errors_are_one_line_naming_the_key(args: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", *args],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 or "usage:" in proc.stderr, proc.stderr
    assert message in proc.stderr


def test_busy_port_is_one_line_and_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "exporter", "--simulate", "--listen", f"127.0.0.1:{port}"],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True, text=True, timeout=30, check=False,
        )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("{")]
    assert errors == [
        line for line in errors if line.startswith("gpu-goodput-exporter: cannot listen on")
    ]
    assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0]


# serving trust: reload, bad URLs, secrets, through the real daemon ---------------------------


class _Engine:
    """A vLLM-shaped engine on a loopback thread; ``queries`` records what it was sent."""

    def __init__(self, generation: float) -> None:
        import http.server
        import threading

        from tests.support.serving import vllm_text

        engine = self
        self.queries: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                engine.queries.append(self.path)
                body = vllm_text(generation).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _get(url: str) -> tuple[str, dict[str, str]]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode(), dict(resp.headers)


def _wait(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.1)


def _up(base: str) -> dict[str, float]:
    found = samples(_get(base + "/metrics")[0])
    return {dict(lbls)["target"]: v for (n, lbls), v in found.items()
            if n == "goodput_serving_target_up"}


def test_sighup_reloads_targets_and_web_config_and_refuses_a_bad_config(tmp_path: Path) -> None:
    """New targets start, removed ones stop and their series go, the web config's headers
    change; a config that does not validate is refused with one log line, the running one
    stays, and goodput_exporter_config_last_reload_successful says so."""
    first, second = _Engine(100.0), _Engine(200.0)
    cfg, web_cfg, log = tmp_path / "config.yaml", tmp_path / "web.yaml", tmp_path / "log"
    cfg.write_text(
        f"serving:\n  interval: 0.2\n  targets:\n  - url: {first.url}\n    gpus: ['0']\n"
    )
    web_cfg.write_text("http_server_config:\n  headers: {X-Frame-Options: deny}\n")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--simulate", "--simulate-gpus", "2",
             "--listen", f"127.0.0.1:{port}", "--config", str(cfg),
             "--web-config-file", str(web_cfg)],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_http(base + "/readyz", timeout=30)
        _wait(lambda: _up(base).get(first.url) == 1.0)
        assert _get(base + "/metrics")[1]["X-Frame-Options"] == "deny"

        cfg.write_text(
            f"serving:\n  interval: 0.2\n  targets:\n  - url: {second.url}\n    gpus: ['1']\n"
        )
        web_cfg.write_text("http_server_config:\n  headers: {X-Frame-Options: sameorigin}\n")
        proc.send_signal(signal.SIGHUP)
        _wait(lambda: _up(base) == {second.url: 1.0})
        text, headers = _get(base + "/metrics")
        assert headers["X-Frame-Options"] == "sameorigin"
        assert first.url not in text  # the removed target's series went with it
        found = samples(text)
        assert value(found, "goodput_exporter_config_last_reload_successful") == 1.0
        assert value(found, "goodput_gpu_tokens_total", gpu="1", kind="generation") == 200.0

        cfg.write_text("serving:\n  no_such_key: 1\n")
        proc.send_signal(signal.SIGHUP)
        _wait(lambda: value(samples(_get(base + "/metrics")[0]),
                            "goodput_exporter_config_last_reload_successful") == 0.0)
        assert _up(base) == {second.url: 1.0}  # the running configuration stays
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        first.close()
        second.close()
    lines = log.read_text().splitlines()
    refused = [line for line in lines if "config_reload_failed" in line]
    assert len(refused) == 1 and "no_such_key" in refused[0]
    assert len([line for line in lines if '"config_reloaded"' in line]) == 1
    assert "Traceback" not in log.read_text()


def test_secrets_in_a_target_url_stay_out_of_logs_metrics_and_debug_state(
    tmp_path: Path,
) -> None:
    engine = _Engine(5.0)
    secret_url = engine.url.replace("http://", "http://scraper:pw-4711@") + "?token=tok-0815"
    dead = "http://127.0.0.1:1/metrics?token=tok-dead-42"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--simulate", "--simulate-gpus", "1",
             "--listen", f"127.0.0.1:{port}", "--serving-target", secret_url,
             "--serving-target", dead],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_http(base + "/readyz", timeout=30)
        _wait(lambda: 1.0 in _up(base).values() and 0.0 in _up(base).values())
        shown = _get(base + "/metrics")[0] + _get(base + "/debug/state")[0]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        engine.close()
    shown += log.read_text()
    for secret in ("pw-4711", "tok-0815", "tok-dead-42"):
        assert secret not in shown
    assert "token=<secret>" in shown
    assert any("token=tok-0815" in q for q in engine.queries)  # still what is scraped


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--serving-target", "http://[::1/metrics"], "is not a valid URL"),
        (["--serving-target", "http://u:hunter2@[::1/metrics"], "<secret>"),
    ],
)
def test_a_malformed_static_target_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", *args],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "hunter2" not in proc.stderr
