"""Fault battery, a node shared by many tenants ([tenancy], issue 33): no pod skews another's
numbers, no client floods the logs, no single input stops the rest.

Each case drives the real part (a real HTTP engine or server on loopback, the real serving
source, the real Kubernetes API client against kmock, the daemon as a subprocess) through
one hostile or careless input and asserts what the other tenants see. The log floods run a
virtual minute through the damper (``exporter/process/logdamp.py``: its clock steps with each
line) and assert the bytes written stay under the budgets of docs/security.md.
"""

from __future__ import annotations

import asyncio
import io
import json
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from exporter import urls
from exporter.metrics.cache import negotiate
from exporter.process import logdamp
from exporter.process.logging import configure
from exporter.readings import ContainerGpus, PodAssignments
from exporter.sources.serving.accumulate import Ledger, Limits
from exporter.sources.serving.config import ServingConfig
from exporter.sources.serving.discovery import PodWatcher, pod_target
from exporter.sources.serving.targets import Target, TargetSet, static_targets
from exporter.web.server import is_loopback
from exporter.wiring import config
from testkit.harness import DaemonProcess
from tests.support.serving import (
    TARGET_GPUS,
    TOKENS,
    ThreadEngine,
    make_source,
    metric,
    start,
    vllm_text,
)
from tests.test_fault_battery import ops_one_line_exit_2, ops_run, samples, value

DROPPED = "goodput_serving_target_dropped_values_total"
PREFIX = "serving.goodput.dev/"

# Budgets of docs/security.md "Log floods", bytes of log in any minute.
ONE_SOURCE_BUDGET = 8 * 1024
"""One subject (a client, a GPU, a target) repeating one event."""
MANY_SOURCES_BUDGET = 64 * 1024
"""One event from any number of subjects (the event's own bucket)."""


# --- attribution: the kubelet's assignment wins -------------------------------------------


def _pod_target(url: str, gpus: tuple[str, ...] = ()) -> Target:
    return Target(url=url, gpus=gpus, namespace="team-a", pod="greedy", origin="kubernetes")


def _assigned(*gpus: str) -> PodAssignments:
    return PodAssignments((ContainerGpus("team-a", "greedy", "c", "nvidia.com/gpu",
                                         tuple(f"GPU-{g}" for g in gpus), gpus),))


@pytest.mark.parametrize(
    ("claim", "assigned", "gpus", "via", "refused"),
    [
        (("0", "1"), (), (), "none", True),  # no GPU at all, claims two
        (("0", "1"), ("2",), ("2",), "pod", True),  # claims others' GPUs
        (("2",), ("2", "3"), ("2",), "explicit", False),  # narrows its own: allowed
    ],
)
async def test_a_pod_cannot_claim_gpus_the_kubelet_did_not_assign(
    claim: tuple[str, ...], assigned: tuple[str, ...], gpus: tuple[str, ...], via: str,
    refused: bool,
) -> None:
    engine = ThreadEngine(lambda _n: vllm_text(500.0))
    source = make_source(ServingConfig(), targets=[_pod_target(engine.url, claim)],
                         pods=_assigned(*assigned) if assigned else None)
    try:
        result = await source.poll()
    finally:
        await source.close()
        engine.close()
    name = "team-a/greedy:" + engine.url.rsplit(":", 1)[1].split("/")[0]
    assert metric(result, TARGET_GPUS, target=name, via=via) == float(len(gpus))
    for gpu in ("0", "1"):
        if gpu not in gpus:
            assert not metric(result, TOKENS, gpu=gpu, kind="generation")
    assert (metric(result, DROPPED, target=name, reason="gpus_refused") or 0) == float(refused)


async def test_engine_labels_of_a_pod_are_held_to_its_assignment() -> None:
    """Triton-style gpu_uuid labels are the tenant's words too: another GPU is refused."""
    body = (
        "# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="m",version="1",gpu_uuid="GPU-0"} 10\n'
    )
    engine = ThreadEngine(lambda _n: body)
    source = make_source(ServingConfig(), targets=[_pod_target(engine.url)],
                         pods=_assigned("3"))
    try:
        result = await source.poll()
    finally:
        await source.close()
        engine.close()
    assert result.reading is not None
    [status] = result.reading.targets
    assert (status.gpus, status.via) == (("3",), "pod")
    assert dict(status.dropped)["gpus_refused"] == 1.0


# --- discovery: each pod alone ------------------------------------------------------------


def _pod(name: str, notes: dict[str, str], ip: str = "10.1.0.7", **meta: Any) -> Any:
    return SimpleNamespace(
        metadata=SimpleNamespace(name=name, namespace="ml", annotations=notes, **meta),
        spec=SimpleNamespace(node_name="n1", containers=[
            SimpleNamespace(ports=[SimpleNamespace(container_port=8000)])]),
        status=SimpleNamespace(phase="Running", pod_ip=ip),
    )


def test_a_superscript_port_is_a_bad_annotation_not_a_crash() -> None:
    """``"²".isdigit()`` is true and ``int("²")`` raises: the whole list used to abort."""
    target = pod_target(_pod("p", {PREFIX + "scrape": "true", PREFIX + "port": "²"}),
                        "n1", PREFIX)
    assert target is not None and "is not a port number" in target.invalid


def test_one_unreadable_pod_costs_that_pod_only_and_deleted_pods_go() -> None:
    published: list[list[Target]] = []
    rejected: list[int] = []
    watcher = PodWatcher(None, "n1", PREFIX, published.append, on_rejected=rejected.append)
    good = _pod("good", {PREFIX + "scrape": "true"})
    broken = _pod("broken", {PREFIX + "scrape": "true"})
    broken.spec.containers = 42  # not a list: pod_target raises on it
    for pod in (good, broken, _pod("bad-port", {PREFIX + "scrape": "true", PREFIX + "port": "²"},
                                   ip="10.1.0.8")):
        watcher._apply("ADDED", pod)
    watcher._changed()
    assert sorted(t.pod for t in published[-1]) == ["bad-port", "good"]
    assert rejected[-1] == 1 and "broken" in next(iter(watcher.rejected))
    leaving = _pod("good", {PREFIX + "scrape": "true"}, deletion_timestamp="2026-01-01")
    watcher._apply("MODIFIED", leaving)  # terminating: dropped before DELETED arrives
    watcher._changed()
    assert [t.pod for t in published[-1]] == ["bad-port"]
    targets = TargetSet()
    targets.set_discovered(published[-1])
    targets.set_rejected(rejected[-1])
    targets()
    assert targets.dropped["bad_pod"] == 1


kubernetes = pytest.importorskip("kubernetes")


async def test_a_bad_pod_does_not_stop_discovery_through_the_api(kmock: Any) -> None:
    """Through the real client and a real HTTP API: the pod with ``port: "²"`` is one bad
    target, the others are listed, and a deleted pod goes."""
    pytest.importorskip("kmock")
    from tests.serving.test_discovery import pod, wait_for

    cfg = kubernetes.client.Configuration()
    cfg.host = str(kmock.url).rstrip("/")
    api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(cfg))
    create = api.create_namespaced_pod
    await asyncio.to_thread(create, "ml", pod("bad", "node-a", {PREFIX + "scrape": "true",
                                                                 PREFIX + "port": "²"}))
    await asyncio.to_thread(create, "ml", pod("good", "node-a", {PREFIX + "scrape": "true"},
                                              ip="10.1.0.9"))
    targets = TargetSet()
    watcher = PodWatcher(api, "node-a", PREFIX, targets.set_discovered, retry_seconds=0.2,
                         on_rejected=targets.set_rejected)
    watcher.start()
    try:
        await wait_for(lambda: len(targets()) == 2)
        assert watcher.state == ("ok", "")
        await asyncio.to_thread(create, "ml", pod("late", "node-a", {PREFIX + "scrape": "true"},
                                                  ip="10.1.0.10"))
        await wait_for(lambda: len(targets()) == 3)
        await asyncio.to_thread(api.delete_namespaced_pod, "good", "ml")
        await wait_for(lambda: sorted(t.pod for t in targets()) == ["bad", "late"])
    finally:
        watcher.stop()


# --- target identity = the redacted label -------------------------------------------------


@pytest.mark.parametrize(
    "second",
    [
        {"url": "http://scraper:pw@127.0.0.1:9/metrics"},  # userinfo
        {"url": "http://127.0.0.1:9/metrics", "basic_auth": {"username": "u", "password": "p"}},
        {"url": "http://127.0.0.1:9/metrics?token=b"},  # query values
    ],
    ids=["userinfo", "basic_auth", "query_values"],
)
def test_two_targets_with_one_label_are_refused(second: dict[str, Any]) -> None:
    first = "http://127.0.0.1:9/metrics" + ("?token=a" if "?" in second["url"] else "")
    with pytest.raises(config.ConfigError, match="same target label"):
        config.build({"serving": {"targets": [first, second]}}, environ={})


@pytest.mark.parametrize(
    "spelling",
    ["http://127.0.0.1:9/metrics#frag", "HTTP://127.0.0.1:9/metrics", "http://h:80/metrics"],
    ids=["fragment", "case", "default_port"],
)
def test_spellings_of_one_endpoint_are_merged(spelling: str) -> None:
    base = "http://h/metrics" if "h:80" in spelling else "http://127.0.0.1:9/metrics"
    settings = config.build({"serving": {"targets": [base, spelling]}}, environ={})
    assert len(static_targets(settings.section(ServingConfig))) == 1


def test_discovered_spellings_that_share_a_label_are_one_target() -> None:
    one = Target("http://10.0.0.1:80/m?token=a", origin="kubernetes", namespace="a", pod="x")
    two = Target("http://10.0.0.1/m?token=b", origin="kubernetes", namespace="a", pod="x")
    assert one.key == two.key
    targets = TargetSet()
    targets.set_discovered([one, two])
    assert len(targets()) == 1 and targets.dropped["duplicate"] == 1


# --- model-name churn: no re-count --------------------------------------------------------


def test_churning_model_names_never_recount_the_engine_counter() -> None:
    """Engine at 1e6 tokens; each scrape names a new model under the 8-model cap, again
    after every stale_after: only the first reading's 1e6 is ever counted."""
    ledger = Ledger(Limits(max_models=8, stale_after=30.0))
    counted, now = 0.0, 0.0
    for i in range(200):
        values = ledger.relabel({("generation_tokens", f"m{i}", ""): 1e6}, "", now)
        step = ledger.step(values, counters=["generation_tokens"], now=now, gpus=lambda _k: 1)
        counted += sum(step.deltas.values())
        ledger.expire(now)
        now += 1.0
    assert counted == 1e6
    assert ledger.dropped["new_series"] + ledger.dropped["max_models"] == 199


# --- a hung target never holds another's publish -------------------------------------------


async def _honest_scrapes(hung: bool, seconds: float = 4.5) -> int:
    honest = ThreadEngine(lambda _n: vllm_text(1.0))
    app = web.Application()
    release = asyncio.Event()

    async def hang(_: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="")

    app.router.add_get("/metrics", hang)
    runner, base = await start(app)
    urls_ = [honest.url] + ([base + "/metrics"] if hung else [])
    # The default interval; a long timeout makes the old behaviour plain (3 scrapes in 24 s).
    source = make_source(ServingConfig(extra_targets=urls_, timeout=10.0))
    try:
        deadline = time.monotonic() + seconds
        tick = time.monotonic()
        while time.monotonic() < deadline:  # the scheduler's fixed-rate loop
            await source.poll()
            tick += source.interval
            await asyncio.sleep(max(tick - time.monotonic(), 0.0))
            tick = max(tick, time.monotonic() - source.interval)
        return len(honest.queries)
    finally:
        release.set()
        await source.close()
        await runner.cleanup()
        honest.close()


async def test_a_hung_target_does_not_slow_an_honest_one() -> None:
    alone = await _honest_scrapes(hung=False)
    beside = await _honest_scrapes(hung=True)
    assert alone >= 4
    assert beside >= alone - 1, (alone, beside)  # before: 1 (the round waited 10 s)


# --- log floods ---------------------------------------------------------------------------


class StepClock:
    """The damper's clock: each read advances ``step`` seconds, so N lines cover N x step
    seconds of virtual time however fast the test runs."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def log_bytes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[float], io.StringIO]]:
    """Configure the JSON logger into a buffer with the damper's clock stepping."""
    logdamp.DAMPER.reset()

    def setup(step: float) -> io.StringIO:
        monkeypatch.setattr(logdamp, "clock", StepClock(step))
        buf = io.StringIO()
        configure("json", "info", stream=buf)
        return buf

    yield setup
    logdamp.DAMPER.reset()
    structlog.reset_defaults()  # tests/conftest.py gives the bridged loggers back


@pytest.mark.parametrize(
    ("event", "subjects", "per_minute", "fields"),
    [
        ("xid_event", 1, 1200, {"gpu": "3", "xid": 79}),  # 20 XIDs a second
        ("serving_target_down", 1, 60, {"reason": "timeout", "error": "no answer in 2s"}),
        ("dcgm_exporter_gpu_unavailable", 1, 30, {"uuid": "GPU-0", "reason": "no_values"}),
        ("config_reload_failed", 1, 600, {"error": "config file c.yml: not valid YAML"}),
        ("serving_target_up", 64, 64 * 60, {"engine": "vllm", "via": "pod"}),
    ],
)
def test_every_repeating_event_stays_under_its_budget(
    log_bytes: Callable[[float], io.StringIO], event: str, subjects: int, per_minute: int,
    fields: dict[str, Any],
) -> None:
    buf = log_bytes(60.0 / per_minute)
    log = structlog.get_logger("flood")
    key = "gpu" if "gpu" in fields else "target"
    for i in range(per_minute):
        log.warning(event, **{key: f"subject-{i % subjects}", **fields})
    budget = ONE_SOURCE_BUDGET if subjects == 1 else MANY_SOURCES_BUDGET
    written = len(buf.getvalue().encode())
    assert written <= budget, (event, written)
    assert logdamp.DAMPER.suppressed[event] > 0
    lines = buf.getvalue().splitlines()
    assert any("suppressed" in json.loads(line) for line in lines[1:]) or subjects > 1


async def test_malformed_requests_are_one_line_each_and_rate_limited(
    log_bytes: Callable[[float], io.StringIO],
) -> None:
    """A flood of requests aiohttp cannot parse: one JSON line per logged request, no
    traceback, and one minute of flood from one client stays under the budget."""
    requests = 600
    buf = log_bytes(60.0 / requests)
    app = web.Application()

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="x 1\n")

    app.router.add_get("/metrics", ok)
    runner, base = await start(app)
    port = int(base.rsplit(":", 1)[1])
    garbage = b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: nan\r\n\r\n" + b"A" * 8000

    def send() -> None:
        for _ in range(requests):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(garbage)
                conn.recv(4096)

    try:
        await asyncio.to_thread(send)
    finally:
        await runner.cleanup()
    text = buf.getvalue()
    assert "Traceback" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines and all(line["event"] == "http_request_malformed" for line in lines)
    assert all(line["client"] == "127.0.0.1" and len(line["error"]) <= 200 for line in lines)
    assert len(text.encode()) <= ONE_SOURCE_BUDGET, len(text.encode())
    assert logdamp.DAMPER.suppressed["http_request_malformed"] >= requests - 20


async def test_an_xid_storm_is_damped(
    log_bytes: Callable[[float], io.StringIO], sim: Any,
) -> None:
    """The real XID source: 1,200 XIDs (a minute at 20/s) on one GPU are all counted, and
    the log stays under the one-source budget."""
    from exporter.sources.nvml_session import NvmlSession
    from exporter.sources.xid import XidSource

    buf = log_bytes(0.05)
    source = XidSource(NvmlSession(sim, "test"))
    source.open()
    try:
        for _ in range(1200):
            sim.inject_xid(3, 48)
        deadline = time.monotonic() + 10
        counted = 0
        while time.monotonic() < deadline and counted < 1200:
            state = source.poll_blocking().reading
            counted = dict(state.gpus["3"].counts).get(48, 0) if state else 0
            await asyncio.sleep(0.05)
    finally:
        source.shutdown()
    assert counted == 1200
    written = [line for line in buf.getvalue().splitlines() if "xid_event" in line]
    assert 0 < len(written) <= logdamp.SUBJECT_BURST + 6
    assert len("\n".join(written).encode()) <= ONE_SOURCE_BUDGET


# --- secrets and /debug/state -------------------------------------------------------------


async def test_dcgm_exporter_credentials_are_redacted() -> None:
    from exporter.sources.profiling.dcgm_exporter import DcgmExporterSource
    from tests.support.serving import inventory

    url = "http://watcher:pw-9911@127.0.0.1:1/metrics?token=tok-5522"
    source = DcgmExporterSource(lambda: inventory(1), url, timeout=1.0)
    try:
        result = await source.poll()
    finally:
        await source.close()
    shown = json.dumps(result.to_json() if hasattr(result, "to_json") else str(result),
                       default=str) + source.shown + result.error
    assert "pw-9911" not in shown and "tok-5522" not in shown
    assert urls.SECRET in source.shown


def _state_request(remote: str, authenticated: bool = False) -> web.Request:
    transport = SimpleNamespace(get_extra_info=lambda name, default=None: (
        (remote, 40000) if name == "peername" else default), is_closing=lambda: False)
    request = make_mocked_request("GET", "/debug/state", transport=transport)
    if authenticated:
        from exporter.web.webconfig import AUTHENTICATED

        request[AUTHENTICATED] = True
    return request


@pytest.mark.parametrize(
    ("remote", "authenticated", "status"),
    [("127.0.0.1", False, 200), ("::1", False, 200), ("10.0.0.5", False, 403),
     ("10.0.0.5", True, 200), ("::ffff:10.0.0.5", False, 403)],
)
async def test_debug_state_is_loopback_only_without_basic_auth(
    remote: str, authenticated: bool, status: int,
) -> None:
    from exporter.wiring.daemon import build
    from tests.test_fault_battery import node

    daemon = build(config.build({"node_name": "n"}, environ={}), node(None))
    app = daemon.app()
    handler = next(r.handler for r in app.router.routes()
                   if getattr(r.resource, "canonical", "") == "/debug/state")
    response = await handler(_state_request(remote, authenticated))
    assert response.status == status
    assert is_loopback("::ffff:127.0.0.1") and not is_loopback("unknown")


# --- config edges -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("interval: " + "[" * 3000 + "]" * 3000 + "\n", "nested deeper"),
        ("serving:\n  targets: []\nstarted: 2021-02-30\n", "day is out of range"),
        ("interval: " + "9" * 5000 + "\n", "digits"),
        ("a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 10)}]\n"
            for i in range(9)), "aliases are expanded"),
    ],
    ids=["deep", "date", "huge_int", "alias_bomb"],
)
def test_a_hostile_config_file_is_one_line_and_exit_2(
    tmp_path: Path, text: str, says: str,
) -> None:
    path = tmp_path / "c.yml"
    path.write_text(text)
    ops_one_line_exit_2(ops_run("--config", str(path)), str(path), says)
    web_path = tmp_path / "w.yml"
    web_path.write_text(text)
    ops_one_line_exit_2(ops_run("--web-config-file", str(web_path)), str(web_path), says)


def test_oversized_files_and_node_names_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yml"
    path.write_text("# pad\n" * 200_000)
    ops_one_line_exit_2(ops_run("--config", str(path)), "larger than")
    ops_one_line_exit_2(ops_run("--node-name", "n" * 300), "node_name")
    long_host = "http://" + "a" * 300 + ".example/metrics"
    ops_one_line_exit_2(ops_run("--serving-target", long_host), "host name longer")


def test_a_hostile_config_on_sighup_is_refused_with_one_line(tmp_path: Path) -> None:
    """Deep YAML, a bad date and a bad web config on SIGHUP: each one line, the reload
    gauge at 0, the running configuration (and /metrics) kept."""
    cfg, web_cfg, log = tmp_path / "c.yml", tmp_path / "w.yml", tmp_path / "log"
    cfg.write_text("serving:\n  interval: 0.5\n")
    web_cfg.write_text("http_server_config:\n  headers: {X-Frame-Options: deny}\n")
    daemon = DaemonProcess("--simulate", "--simulate-gpus", "1", "--config", str(cfg),
                           "--web-config-file", str(web_cfg), log=log)
    daemon.start(timeout=30)
    assert daemon.proc is not None
    proc, base = daemon.proc, daemon.url
    try:
        def reload_gauge() -> float | None:
            import urllib.request

            with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
                found = samples(resp.read().decode())
            return value(found, "goodput_exporter_config_last_reload_successful")

        for bad_cfg, bad_web in (("x: " + "[" * 3000 + "]" * 3000, None),
                                 ("x: 2021-02-30\n", None),
                                 (None, "basic_auth_users: [oops\n")):
            if bad_cfg is not None:
                cfg.write_text(bad_cfg)
            if bad_web is not None:
                cfg.write_text("serving:\n  interval: 0.5\n")
                web_cfg.write_text(bad_web)
            proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 20
            while reload_gauge() != 0.0:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            cfg.write_text("serving:\n  interval: 0.5\n")
            web_cfg.write_text("http_server_config:\n  headers: {X-Frame-Options: deny}\n")
            proc.send_signal(signal.SIGHUP)
            while reload_gauge() != 1.0:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert proc.poll() is None
    finally:
        daemon.stop(timeout=15)
    text = log.read_text()
    assert "Traceback" not in text
    failed = [line for line in text.splitlines() if "config_reload_failed" in line]
    assert len(failed) == 3, failed
    assert "basic auth users reload failed" not in text


async def test_a_reload_of_a_large_file_never_blocks_metrics(tmp_path: Path) -> None:
    """The reload parses on a worker thread: /metrics answers while a file at the size cap
    is read (before: 7.7 s of a blocked event loop for a 1.9 MB alias file)."""
    import aiohttp

    from exporter.web import webconfig
    from exporter.wiring.daemon import build
    from exporter.wiring.reload import Reloader, WebLayer
    from tests.test_fault_battery import node, running

    cfg = tmp_path / "c.yml"
    cfg.write_text("interval: 0.5\n")
    daemon = build(config.build({"node_name": "r"}, environ={}, config_file=str(cfg)),
                   node(None))
    reloader = Reloader(daemon, {"node_name": "r"}, str(cfg), None,
                        WebLayer(webconfig.load(None)))
    rows = "".join(f"  k{i}: [{', '.join(['v'] * 40)}]\n" for i in range(6000))
    cfg.write_text("model:\n  peak_flops: {}\nx:\n" + rows[: 1000 * 1000])
    async with running(daemon) as url, aiohttp.ClientSession() as http:
        reload = asyncio.ensure_future(reloader.run())
        slowest = 0.0
        while not reload.done():
            started = time.monotonic()
            async with http.get(url + "/metrics") as resp:
                assert resp.status == 200
                await resp.read()
            slowest = max(slowest, time.monotonic() - started)
            await asyncio.sleep(0.02)
        assert reload.result() is False  # the file does not validate: refused, one line
    assert slowest < 1.0, slowest


# --- small ones ---------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["gzip;q=0", "gzip; q=0.0", "GZIP;Q=0.000, identity"])
def test_gzip_refused_with_q_0_gets_a_plain_body(header: str) -> None:
    assert not negotiate(None, header).gzipped
    assert negotiate(None, "gzip;q=0.5").gzipped


async def test_https_to_a_plain_http_engine_is_a_tls_error_with_a_message() -> None:
    import aiohttp

    from exporter.sources.serving.errors import ScrapeError
    from exporter.sources.serving.fetch import fetch

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def close_each() -> None:
        for _ in range(1):
            conn, _ = server.accept()
            conn.recv(16)
            conn.close()

    closer = asyncio.get_running_loop().run_in_executor(None, close_each)
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(ScrapeError) as caught:
                await fetch(session, f"https://127.0.0.1:{port}/metrics", 5.0, 1000)
    finally:
        await closer
        server.close()
    assert caught.value.reason == "tls_error" and str(caught.value)


async def test_a_bad_web_config_on_sighup_is_one_line_even_with_logins(tmp_path: Path) -> None:
    """The refused reload logs once; the running basic auth does not report the same bad
    file again when the next login notices it changed (before: two lines)."""
    import base64

    import aiohttp
    import bcrypt
    from structlog.testing import capture_logs

    from exporter.web import webconfig
    from exporter.wiring.daemon import build
    from exporter.wiring.reload import Reloader, WebLayer
    from tests.test_fault_battery import node
    from tests.test_reload import serving

    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4)).decode()
    web_file = tmp_path / "web.yml"
    web_file.write_text(f"basic_auth_users:\n  prom: '{hashed}'\n")
    # no job source: the fake node's processes have no /proc (its error is not this test's)
    flags = {"node_name": "w", "collectors": {"jobs": False}}
    daemon = build(config.build(flags, environ={}), node(None))
    layer = WebLayer(webconfig.load(web_file))
    reloader = Reloader(daemon, flags, None, str(web_file), layer)
    login = {"Authorization": "Basic " + base64.b64encode(b"prom:right").decode()}
    async with serving(daemon, layer) as url, aiohttp.ClientSession() as http:
        web_file.write_text("basic_auth_users: [oops\n")
        with capture_logs() as logs:
            assert reloader() is False
            async with http.get(url + "/metrics", headers=login) as resp:
                assert resp.status == 200  # the running users stay
    errors = [e for e in logs if e["log_level"] == "error"]
    assert [e["event"] for e in errors] == ["config_reload_failed"], errors
