"""Fault battery, exporter side ([hardening]): each case drives the real daemon through one
fault and asserts what the user sees (a metric with a reason) and that nothing else was lost.

Engine, kubelet and profiling faults live with their sources' tests (tests/serving,
tests/kubernetes, tests/test_gpm_source.py, tests/test_dcgm_source.py); this file holds the
faults of the daemon as a whole: a GPU lost mid-run, a scrape storm with slow clients,
SIGTERM in the middle of a request, SIGHUP with a good and a bad new config, secrets in a
target URL and a malformed static target URL. The hostile engines of issue 22 (model-name
churn, 1e18/1e308/Inf counters, start-time flapping, duplicate spellings, discovered bad
URLs, target caps) are in tests/serving/test_trust.py, test_truth.py and the property tests
of tests/serving/test_accumulate.py; tests/test_daemon_exposition.py drives them through the
real daemon and checks its /metrics with `promtool check metrics`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from exporter.sim.fake_nvml import FakeGpu, FakeNvml
from exporter.sim.patterns import NODE
from exporter.sim.physics import GpuPhysics
from exporter.sources.nvml_session import NvmlSession
from exporter.wiring import config
from exporter.wiring.daemon import Daemon, build
from tests.conftest import REPO
from tests.support.prometheus import free_port, wait_http
from tests.support.serving import ThreadEngine, vllm_text

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


def _refused(args: list[str]) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Start the simulated daemon with ``args``; it must refuse to run (exit 2). Returns the
    process and the non-blank lines it wrote to stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", *args],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert proc.returncode == 2, proc.stderr
    return proc, [line for line in proc.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "0"], "interval"),
        (["--profiling", "sometimes"], "profiling"),
        (["--listen", "nowhere"], "listen"),
    ],
)
def test_config_errors_are_one_line_naming_the_key(args: list[str], message: str) -> None:
    proc, lines = _refused(args)
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
    assert "--listen HOST:PORT (make run LISTEN=HOST:PORT)" in errors[0]  # how to move


# serving trust: reload, bad URLs, secrets, through the real daemon ---------------------------


def _engine(generation: float) -> ThreadEngine:
    """A vLLM-shaped engine on a loopback thread serving ``generation`` tokens."""
    return ThreadEngine(lambda _n: vllm_text(generation))


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
    first, second = _engine(100.0), _engine(200.0)
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
    engine = _engine(5.0)
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
    proc, lines = _refused(args)
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "hunter2" not in proc.stderr
# === [ops] config edges, HOST:0, login floods (issue 22 items 6 and 8) =====================
# Each case runs the real daemon as a subprocess (``python -m exporter``) on loopback.

OPS_ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def ops_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", "--simulate-gpus", "1", *args],
        cwd=REPO, env=OPS_ENV, capture_output=True, text=True, timeout=30, check=False,
    )


def ops_one_line_exit_2(proc: subprocess.CompletedProcess[str], *names: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1, proc.stderr
    for name in names:
        assert name in lines[0], lines[0]


@pytest.mark.parametrize("flag", ["--config", "--web-config-file"])
def test_a_non_utf8_file_is_one_line_and_exit_2(tmp_path: Path, flag: str) -> None:
    path = tmp_path / "latin1.yml"
    path.write_bytes("# r\u00e9glages du n\u0153ud\ninterval: 1\n".encode("cp1252"))
    ops_one_line_exit_2(ops_run(flag, str(path)), str(path), "not UTF-8")


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("serving:\n  interval: .inf\n", "serving.interval"),
        ("serving:\n  interval: 7200\n", "serving.interval"),
        ("kubernetes:\n  interval: .nan\n", "kubernetes.interval"),
        ("serving:\n  timeout: .inf\n", "serving.timeout"),
    ],
)
def test_an_infinite_or_hour_long_interval_is_refused(
    tmp_path: Path, yaml_text: str, key: str
) -> None:
    path = tmp_path / "c.yml"
    path.write_text(yaml_text)
    ops_one_line_exit_2(ops_run("--config", str(path)), key)


class OpsDaemon:
    """The daemon on ``--listen 127.0.0.1:0``: the port comes from its "listening" line."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.log = tmp_path / "daemon.log"
        self._out = self.log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--simulate", "--simulate-gpus", "1",
             "--listen", "127.0.0.1:0", *args],
            cwd=REPO, env=OPS_ENV, stdout=self._out, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            found = [e for e in self.events() if e.get("event") == "listening"]
            if found:
                self.address = str(found[0]["address"])
                break
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "no listening line"
            time.sleep(0.05)
        self.url = f"http://{self.address}"
        wait_http(self.url + "/healthz", timeout=30)

    def events(self) -> list[dict[str, object]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()
        return self.proc.returncode


def test_listen_on_port_0_binds_a_free_port_and_logs_it(tmp_path: Path) -> None:
    daemon = OpsDaemon(tmp_path)
    try:
        host, port = daemon.address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        with urllib.request.urlopen(daemon.url + "/metrics", timeout=10) as response:
            assert b"goodput_gpu_up" in response.read()
    finally:
        assert daemon.stop() == 0


def _basic(password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"prom:{password}".encode()).decode()}


async def _flood(url: str, source: str, clients: int, seconds: float) -> list[int]:
    """``clients`` loops sending distinct wrong passwords from ``source`` for ``seconds``
    (bounded), every answer's status kept."""
    statuses: list[int] = []
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=0, local_addr=(source, 0))

    async def one(http: aiohttp.ClientSession, n: int) -> None:
        for i in itertools.count():
            if time.monotonic() > deadline:
                return
            async with http.get(url, headers=_basic(f"guess-{n}-{i}")) as response:
                await response.read()
                statuses.append(response.status)

    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        await asyncio.gather(*(one(http, n) for n in range(clients)))
    return statuses


async def test_a_login_flood_barely_delays_the_first_valid_scrape(tmp_path: Path) -> None:
    """200 clients send distinct wrong passwords (bcrypt cost 10, as operators configure)
    from 127.0.0.2; the first valid scrape, from 127.0.0.1 and so needing its own bcrypt
    check, is answered well within the bound (1 s in the issue; measured ~0.1 s in
    docs/benchmarks.md; asserted loosely here so a loaded machine does not fail it; before
    the fix it took 6.6 s). Every failure is counted, and logged once per client."""
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prom: '{hashed}'\n")
    daemon = OpsDaemon(tmp_path, "--web-config-file", str(web))
    try:
        metrics = daemon.url + "/metrics"
        flood_seconds = 4.0
        flooding = asyncio.create_task(_flood(metrics, "127.0.0.2", 200, flood_seconds))
        await asyncio.sleep(1.5)  # the flood is at full speed
        connector = aiohttp.TCPConnector(local_addr=("127.0.0.1", 0), force_close=True)
        async with aiohttp.ClientSession(connector=connector) as http:
            started = time.monotonic()
            async with http.get(metrics, headers=_basic("right")) as response:
                await response.read()
                took = time.monotonic() - started
                assert response.status == 200
        assert not flooding.done(), "the flood ended before the valid scrape was timed"
        statuses = await flooding
        assert took < 3.0, f"first valid scrape took {took:.2f} s under the flood"
        assert len(statuses) / flood_seconds >= 50, f"only {len(statuses)} flood answers"
        assert set(statuses) <= {401, 429}

        async with aiohttp.ClientSession() as http, \
                http.get(metrics, headers=_basic("right")) as response:
            found = samples(await response.text())
        counted = {
            reason: value(found, "goodput_exporter_http_auth_failures_total", reason=reason)
            for reason in ("missing", "malformed", "wrong_credentials", "throttled")
        }
        assert counted["missing"] == 0.0 and counted["malformed"] == 0.0
        assert (counted["wrong_credentials"] or 0) + (counted["throttled"] or 0) == len(statuses)
        assert counted["throttled"] == statuses.count(429)
        logged = [e for e in daemon.events() if e.get("event") == "basic auth failed"]
        assert [e["client"] for e in logged] == ["127.0.0.2"]  # once a minute per client
    finally:
        assert daemon.stop() == 0
