"""The row model behind ``top`` and the landing page, the text frame, the key handling, and
the landing page and ``top`` against a real daemon behind TLS and basic auth."""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from aiohttp import web

from exporter.sources.nvml_session import NvmlSession
from exporter.view.page import render
from exporter.view.rows import Rates, arrange, counter_lines, memory_text, parse
from exporter.view.source import Endpoint
from exporter.view.table import frame
from exporter.view.top import State
from exporter.web import webconfig
from exporter.wiring.config import build as build_settings
from exporter.wiring.daemon import build
from tests.support.pki import make_pki

EXPOSITION = """\
goodput_exporter_build_info{node="n1",version="9.9",backend="nvml",python_version="3"} 1
goodput_gpu_info{gpu="0",node="n1",name="H100"} 1
goodput_gpu_info{gpu="1",node="n1",name="H100"} 1
goodput_gpu_info{gpu="2",node="n1",name="H100"} 1
goodput_gpu_info{gpu="10",node="n1",name="H100"} 1
goodput_gpu_up{gpu="0",node="n1",reason=""} 1
goodput_gpu_up{gpu="1",node="n1",reason=""} 1
goodput_gpu_up{gpu="2",node="n1",reason="gpu_lost"} 0
goodput_gpu_up{gpu="10",node="n1",reason=""} 1
goodput_gpu_regime{gpu="0",node="n1",regime="compute_bound"} 1
goodput_gpu_regime{gpu="1",node="n1",regime="launch_bound"} 1
goodput_gpu_regime{gpu="10",node="n1",regime="comm_wait"} 1
goodput_gpu_busy_unproductive{gpu="1",node="n1",reason="hollow_busy"} 1
goodput_gpu_sm_active_ratio{gpu="0",node="n1"} 0.96
goodput_gpu_sm_active_ratio{gpu="1",node="n1"} 0.02
goodput_gpu_tensor_active_ratio{gpu="0",node="n1"} 0.5
goodput_gpu_power_watts{gpu="0",node="n1"} 600
goodput_gpu_power_watts{gpu="1",node="n1"} 150
goodput_gpu_joules_per_token{gpu="0",node="n1"} 0.25
goodput_gpu_profiling_available{gpu="10",node="n1",source="gpm",reason="unsupported"} 0
goodput_gpu_job_info{gpu="0",node="n1",job_source="slurm",namespace="",job_id="4242"} 1
goodput_gpu_job_info{gpu="10",node="n1",job_source="kubernetes",namespace="ml",job_id="train"} 1
goodput_gpu_pod_info{gpu="10",node="n1",namespace="ml",pod="train-0",container="c",job_name=""} 1
goodput_gpu_pod_info{gpu="1",node="n1",namespace="web",pod="llm-0",container="c",job_name=""} 1
goodput_job_straggler{node="n1",job_source="kubernetes",namespace="ml",job_id="train",gpu="10"} 1
# TYPE goodput_gpu_tokens counter
goodput_gpu_tokens_total{gpu="0",node="n1",kind="generation",model="m",engine="vllm"} {tokens}
goodput_gpu_tokens_total{gpu="0",node="n1",kind="prompt",model="m",engine="vllm"} 999999
# TYPE goodput_gpu_pcie_bytes counter
goodput_gpu_pcie_bytes_total{gpu="0",node="n1",direction="rx"} {rx}
goodput_gpu_pcie_bytes_total{gpu="0",node="n1",direction="tx"} 0
goodput_gpu_link_peak_bytes_per_second{gpu="0",node="n1",link="pcie"} 1e9
# TYPE goodput_gpu_clock_event_seconds counter
goodput_gpu_clock_event_seconds_total{gpu="0",node="n1",reason="hw_thermal_slowdown"} {thermal}
"""


def _text(tokens: float, rx: float, thermal: float) -> str:
    return (EXPOSITION.replace("{tokens}", str(tokens)).replace("{rx}", str(rx))
            .replace("{thermal}", str(thermal)))


def _view() -> Any:
    rates = Rates()
    parse(_text(1000, 0, 0), rates, now=100.0)
    return parse(_text(3000, 1e9, 1.0), rates, now=102.0)


def test_rows_carry_regime_reasons_jobs_stragglers_and_rates() -> None:
    view = _view()
    assert (view.node, view.version, view.backend) == ("n1", "9.9", "nvml")
    rows = {r.gpu: r for r in view.rows}
    assert [r.gpu for r in view.rows] == ["0", "1", "2", "10"]  # numeric order
    zero = rows["0"]
    assert zero.tokens_per_second == 1000.0  # generation only, (3000 - 1000) / 2 s
    assert zero.bus_bytes_per_second == 5e8 and zero.bus == 0.5
    assert zero.throttle == "hw_thermal_slowdown" and "throttled" in zero.why
    assert (zero.job, zero.job_source) == ("4242", "slurm")  # a job without a namespace
    assert zero.joules_per_token == 0.25
    assert rows["1"].why.startswith("hollow busy") and rows["1"].job == "web/llm-0"
    assert rows["1"].job_source == "kubernetes"  # from pod_info: no job_info for it
    assert not rows["2"].up and rows["2"].why == "down: gpu_lost"
    ten = rows["10"]
    assert ten.straggler and ten.job == "ml/train"  # job_info wins over pod_info
    assert "straggler" in ten.why and "no profiling: unsupported" in ten.why


def test_first_read_has_no_rates_and_a_quiet_gpu_says_its_regime() -> None:
    view = parse(_text(1000, 0, 0), Rates(), now=1.0)
    assert view.jobs == ()  # no goodput_job_gpus: no multi-GPU job
    zero = next(r for r in view.rows if r.gpu == "0")
    assert zero.tokens_per_second is None and zero.throttle == ""
    assert zero.why == "tensor/SM busy"


def test_sort_and_filter() -> None:
    rows = _view().rows
    assert [r.gpu for r in arrange(rows, "power")] == ["0", "1", "2", "10"]
    assert [r.gpu for r in arrange(rows, "sm", reverse=True)][-1] == "0"
    assert [r.gpu for r in arrange(rows, "gpu", "hollow")] == ["1"]
    assert [r.gpu for r in arrange(rows, "gpu", "ml train")] == ["10"]
    assert arrange(rows, "gpu", "nothing-like-this") == []


def test_frame_fits_80_columns_and_keeps_every_gpu() -> None:
    view = _view()
    lines = frame(view, view.rows, 80, selected=1)
    assert all(len(line) <= 80 for line in lines)
    body = "\n".join(lines)
    for regime in ("compute_bound", "launch_bound", "comm_wait", "down"):
        assert regime in body
    assert " 10*" in body  # the straggler mark
    detail = lines[next(i for i, x in enumerate(lines) if x.startswith("GPU 1 ")):]
    assert 1 <= len(detail) <= 3  # the selected GPU's detail, wrapped between its parts
    assert "job web/llm-0 (kubernetes)" in " ".join(x.strip() for x in detail)
    assert "JOB" in lines[1] and "J/TOK" not in lines[1]  # the detail line has it
    assert "TOK/S" in frame(view, view.rows, 100)[1]


def test_keys_sort_filter_select_and_quit() -> None:
    state = State(view=_view())
    assert state.key(ord("s")) and state.sort == "regime"
    for ch in "/hollow":
        state.key(ord(ch))
    assert state.footer().startswith("filter: hollow_")
    state.key(10)
    assert [r.gpu for r in state.rows()] == ["1"] and state.filter == "hollow"
    state.key(ord("j"))
    assert state.selected == 0  # held on the only row
    assert state.key(ord("q")) is False


def test_page_escapes_and_links() -> None:
    view = _view()
    page = render(view, view.rows, "gpu", '<script>"', debug_state=False)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert 'href="metrics"' in page and 'href="runbooks/"' in page
    assert "debug/state" not in page
    assert 'http-equiv="refresh"' in page and "http" not in page.split("<style>")[1][:200]
    assert page.count("<tr class=") == 4


PASSWORD = "s3cret"


@pytest.fixture
async def tls_daemon(sim: Any, tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """https://127.0.0.1:<port> of a real daemon behind TLS and basic auth, and its CA."""
    pki = make_pki(tmp_path)
    pki.issue("server", server=True)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    config = pki.dir / "web-config.yml"
    config.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"},
        "basic_auth_users": {"sre": hashed}}))
    web_config = webconfig.load(config)
    settings = build_settings({"simulate": True, "node_name": "node-a"}, {})
    session = NvmlSession(sim, "simulated")
    session.open()
    runner = web.AppRunner(build(settings, session).app(list(web_config.middlewares)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=web_config.ssl_context)
    await site.start()
    try:
        yield f"127.0.0.1:{runner.addresses[0][1]}", pki.dir / "ca.crt"
    finally:
        await runner.cleanup()


async def test_landing_page_and_top_read_a_daemon_behind_tls_and_basic_auth(
        tls_daemon: tuple[str, Path]) -> None:
    address, ca = tls_daemon
    good = Endpoint(f"https://sre:{PASSWORD}@{address}/", ca_file=str(ca))
    page = ""
    for _ in range(100):  # the first poll takes a moment
        page = await asyncio.to_thread(good.read)
        if page.count("<tr class=") == 8:
            break
        await asyncio.sleep(0.05)
    assert "Node node-a: 8 GPUs" in page and page.count("<tr class=") == 8
    with pytest.raises(OSError, match="HTTP 401"):
        await asyncio.to_thread(Endpoint(f"https://{address}/", ca_file=str(ca)).read)
    with pytest.raises(OSError) as err:  # an untrusted certificate, and no password shown
        await asyncio.to_thread(Endpoint(f"https://sre:{PASSWORD}@{address}/").read)
    assert PASSWORD not in str(err.value)
    text = await asyncio.to_thread(
        Endpoint(f"https://sre:{PASSWORD}@{address}/metrics", insecure=True).read)
    assert len(parse(text).rows) == 8
    assert isinstance(ssl.create_default_context(), ssl.SSLContext)


def test_mig_ids_keep_their_column() -> None:
    text = ('goodput_gpu_regime{gpu="0-13",node="n",regime="idle"} 1\n'
            'goodput_gpu_regime{gpu="0-1",node="n",regime="compute_bound"} 1\n')
    view = parse(text)
    assert [r.gpu for r in view.rows] == ["0-1", "0-13"]
    lines = frame(view, view.rows, 80)
    assert any(line.lstrip().startswith("0-13 ") for line in lines), lines


def test_a_short_terminal_scrolls_to_keep_the_selected_gpu() -> None:
    from exporter.view.top import screen_lines

    state = State(view=_view(), selected=3)
    lines = screen_lines(state, 80, 6)
    assert len(lines) <= 6 and any(line.startswith(">10*") for line in lines)
    assert lines[-1].startswith("sort: gpu")


def test_top_simulate_that_cannot_start_says_so_in_one_line() -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    done = subprocess.run([sys.executable, "-m", "exporter", "top", "--simulate",
                           "--simulate-gpus", "0", "--once"], capture_output=True, text=True,
                          timeout=60, check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "simulate_gpus" in done.stderr


# rates that read right at once, and never flicker -------------------------------------------


def test_a_step_counter_reads_throttled_in_every_frame_once_seen() -> None:
    """The clock-event counter moves 5 s at a time every 5th second (a GPU throttled all the
    time): read every second, the GPU reads throttled from its first step on, every frame."""
    rates = Rates()
    seen = []
    for second in range(60):
        thermal = 5.0 * ((second + 3) // 5)  # the first step at second 2
        view = parse(_text(1000 * second, 0, thermal), rates, now=float(second))
        seen.append(bool(next(r for r in view.rows if r.gpu == "0").throttle))
    first = seen.index(True)
    assert first <= 5 and all(seen[first:]), seen


def test_rates_take_the_newest_sample_a_window_old_and_a_young_series_its_oldest() -> None:
    rates = Rates(window=10.0)
    rates.add(0.0, {("a",): 0.0})
    rates.add(2.0, {("a",): 20.0})  # thinned: less than a quarter window after the last
    rates.add(3.0, {("a",): 30.0, ("b",): 0.0})
    rates.add(6.0, {("a",): 60.0, ("b",): 30.0})
    assert rates.since(12.0, {("a",): 120.0, ("b",): 90.0}) == {("a",): 10.0, ("b",): 10.0}
    assert rates.since(12.5, {("a",): 125.0}) == {("a",): 10.0}  # against 0.0, 12.5 s old
    assert Rates().since(5.0, {("a",): 1.0}) == {}  # nothing kept: no rate, never zero


def test_a_kept_body_is_parsed_only_when_needed() -> None:
    rates = Rates()
    rates.add(0.0, counter_lines(_text(1000, 0, 0).encode()))
    view = parse(_text(11000, 0, 0), rates, now=10.0, keep=False)
    assert next(r for r in view.rows if r.gpu == "0").tokens_per_second == 1000.0
    assert len(rates._samples) == 1  # keep=False: the page's samples come from the encoder


def test_memory_in_gib_and_allocated_idle_marked() -> None:
    text = (EXPOSITION.split("# TYPE")[0]
            + 'goodput_gpu_regime{gpu="2",node="n1",regime="allocated_idle"} 1\n'
            + 'goodput_gpu_memory_used_bytes{gpu="0",node="n1"} 64424509440\n'
            + 'goodput_gpu_memory_total_bytes{gpu="0",node="n1"} 85899345920\n'
            + 'goodput_gpu_memory_used_bytes{gpu="1",node="n1"} 64424509440\n'
            + 'goodput_gpu_regime{gpu="1",node="n1",regime="allocated_idle"} 1\n')
    text = text.replace('goodput_gpu_regime{gpu="1",node="n1",regime="launch_bound"} 1\n', "")
    view = parse(text)
    rows = {r.gpu: r for r in view.rows}
    assert memory_text(rows["0"]) == "60 / 80 GiB"  # an "H100 80GB": 80 GiB, not 86 GB
    assert rows["1"].why.startswith("allocated idle: 60 GiB held")
    assert not any(r.startswith("allocated") for r in rows["2"].reasons())  # down first
    page = render(view, view.rows, "gpu", "")
    assert "60 / 80 GiB" in page and "86" not in page
    assert page.count('<tr class="warn">') >= 2  # the hollow GPU and the held-idle one


JOBS = """\
goodput_job_gpus{node="n1",job_source="slurm",namespace="",job_id="4242"} 2
goodput_job_gpus{node="n1",job_source="process",namespace="",job_id="7"} 1
goodput_gpu_job_info{gpu="9",node="n1",job_source="slurm",namespace="",job_id="4242"} 1
goodput_gpu_job_info{gpu="10",node="n1",job_source="slurm",namespace="",job_id="4242"} 1
goodput_gpu_job_info{gpu="3",node="n1",job_source="process",namespace="",job_id="7"} 1
goodput_gpu_regime{gpu="3",node="n1",regime="compute_bound"} 1
goodput_gpu_regime{gpu="9",node="n1",regime="host_bound"} 1
goodput_gpu_regime{gpu="10",node="n1",regime="comm_wait"} 1
goodput_job_straggler{node="n1",job_source="slurm",namespace="",job_id="4242",gpu="9"} 1
# TYPE goodput_gpu_job_seconds counter
"""
PARTS = {"9": {"working": 2.0, "host_stalled": 8.0},
         "10": {"working": 4.0, "waiting": 6.0}}


def _jobs_text(seconds: float) -> str:
    lines = [
        f'goodput_gpu_job_seconds_total{{gpu="{gpu}",node="n1",job_source="slurm",'
        f'namespace="",job_id="4242",part="{part}"}} {share / 10 * seconds}'
        for gpu, parts in PARTS.items()
        for part in ("working", "transferring", "waiting", "host_stalled", "idle")
        for share in [parts.get(part, 0.0)]
    ]
    return JOBS + "\n".join(lines) + "\n"


def test_a_multi_gpu_job_shows_its_gpus_straggler_and_time_split() -> None:
    rates = Rates()
    assert parse(_jobs_text(100), rates, now=0.0).jobs[0].split_text() == "-"
    view = parse(_jobs_text(110), rates, now=10.0)
    (job,) = view.jobs  # the one-GPU job is not a multi-GPU job
    assert (job.name, job.job_source, job.gpus, job.straggler) == ("4242", "slurm",
                                                                  ("9", "10"), "9")
    assert job.split_text() == "work 0.30 xfer 0.00 wait 0.30 host 0.40 idle 0.00"
    lines = frame(view, view.rows, 80)
    assert " job 4242 (slurm) GPUs 9*,10  work 0.30 xfer 0.00 wait 0.30 host 0.40 idle 0.00" \
        in [line.rstrip() for line in lines], lines
    assert not any(" job " in line for line in frame(view, arrange(view.rows, "gpu", "3"), 80))
    selected = next(i for i, r in enumerate(view.rows) if r.gpu == "9")
    footer = frame(view, view.rows, 200, selected=selected)[-1]
    assert footer.rstrip().endswith("the job loses 0.40 to its host (storage, input pipeline, "
                           "checkpointing)"), footer
    page = render(view, arrange(view.rows, "gpu", "4242"), "gpu", "4242")
    assert "<h2>Multi-GPU jobs</h2>" in page and "<td>9, 10</td>" in page
    assert '<td class="n">0.40</td>' in page
    assert "Multi-GPU jobs" not in render(view, [], "gpu", "nothing-like-this")


def _serving_text(seconds: float) -> str:
    """The same job as a serving engine split over GPUs 9 and 10: 800 generated tokens/s in
    all (400 on each), its GPUs working 1.0 and 0.6 of their time (GPU 9 stalled 0.4 of it
    waiting for requests, GPU 10 waiting 0.4 on GPU 9)."""
    parts = {"9": {"working": 10.0}, "10": {"working": 6.0, "waiting": 4.0}}
    lines = [
        f'goodput_gpu_job_seconds_total{{gpu="{gpu}",node="n1",job_source="slurm",'
        f'namespace="",job_id="4242",part="{part}"}} {p.get(part, 0.0) / 10 * seconds}'
        for gpu, p in parts.items()
        for part in ("working", "transferring", "waiting", "host_stalled", "idle")
    ]
    lines += ["# TYPE goodput_gpu_tokens counter"] + [
        f'goodput_gpu_tokens_total{{gpu="{gpu}",node="n1",kind="{kind}",model="m",'
        f'engine="llama.cpp"}} {rate * seconds}'
        for gpu in ("9", "10") for kind, rate in (("generation", 400.0), ("prompt", 900.0))]
    return JOBS + "\n".join(lines) + "\n"


def test_a_serving_job_shows_its_tokens_per_gpu_second_working() -> None:
    rates = Rates()
    parse(_serving_text(100), rates, now=0.0)
    view = parse(_serving_text(110), rates, now=10.0)
    (job,) = view.jobs
    assert job.tokens_per_second == pytest.approx(800.0)  # generated tokens only
    assert job.working_gpus == pytest.approx(1.6)
    assert job.tokens_per_working_second == pytest.approx(500.0)
    assert job.split_text() == "work 0.80 xfer 0.00 wait 0.20 host 0.00 tok/w 500"
    lines = [line.rstrip() for line in frame(view, view.rows, 80)]
    assert " job 4242 (slurm) GPUs 9*,10  work 0.80 xfer 0.00 wait 0.20 host 0.00 " \
        "tok/w 500" in lines, lines
    page = render(view, view.rows, "gpu", "")
    assert "<th>Tokens/s per working GPU</th>" in page and '<td class="n">500</td>' in page
    for words in ("storage, the input pipeline, checkpointing", "a peer GPU", "the links"):
        assert words in page
    training = parse(_jobs_text(110), Rates(), now=0.0).jobs[0]
    assert training.tokens_per_working_second is None and training.tokens_text() == ""


# the landing page's first load ---------------------------------------------------------------


class Bodies:
    """The exposition cache as the page sees it: observers called per encode, a body."""

    def __init__(self) -> None:
        self.observers: list[Any] = []
        self.current = b""

    def observe(self, observer: Any) -> None:
        self.observers.append(observer)

    def encode(self, now: float, text: str) -> None:
        self.current = text.encode()
        for observer in self.observers:
            observer(now, self.current)

    def body(self, _variant: Any) -> bytes:
        return self.current


async def test_the_landing_pages_first_load_shows_every_rate_the_daemon_has(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon encoded for a while before anyone asked for ``/``: the first load takes
    its rates against those bodies, so no rate reads ``-`` and nothing waits for a reload."""
    from aiohttp.test_utils import make_mocked_request

    from exporter.view import page

    bodies = Bodies()
    landing = page.handler(bodies, docs=["top.md"])  # type: ignore[arg-type]
    for second in range(13):
        bodies.encode(float(second), _text(1000 * second, 1e8 * second, 0.5 * second))
    monkeypatch.setattr(page.time, "monotonic", lambda: 12.5)  # the request comes later
    response = await landing(make_mocked_request("GET", "/"))
    html = response.text or ""
    row = html.split('<td>0</td>')[1].split("</tr>")[0]
    assert "1.0k" in row and "0.10" in row  # tokens/s, the bus bar against its 1e9 peak
    assert "throttled: hw_thermal_slowdown" in row
    assert '<span class="muted">-</span>' not in row.split("</td>")[3]  # SM active
    assert '<a href="docs/top.md">top.md</a>' in html


def test_top_once_against_a_stopped_daemon_prints_one_line_and_no_frame() -> None:
    import os
    import socket
    import subprocess
    import sys

    from tests.conftest import REPO

    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "exporter", "top", "--once", "--url",
                           f"http://127.0.0.1:{port}/metrics"], capture_output=True,
                          text=True, timeout=60, check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"gpu-goodput-exporter top: cannot read http://127.0.0.1:{port}")


async def test_docs_are_served_from_a_checkout_only_by_their_listed_names(
        tmp_path: Path) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from exporter.view import docs

    assert "top.md" in docs.available() and "jobs.md" in docs.available()  # this checkout
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n")
    (tmp_path / "secret.txt").write_text("SECRET\n")
    assert docs.available(tmp_path / "docs") == {}  # not this project's: an installed package
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "gpu-goodput-exporter"\n')
    app = web.Application()
    assert docs.add_routes(app, tmp_path / "docs") == ["a.md"]
    async with TestClient(TestServer(app)) as client:
        page = await client.get("/docs/a.md")
        assert page.status == 200 and await page.text() == "# A\n"
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        for bad in ("/docs/b.md", "/docs/..%2Fsecret.txt", "/docs/%2E%2E/secret.txt"):
            answer = await client.get(bad)
            assert answer.status == 404 and "SECRET" not in await answer.text(), bad
        assert "/docs/a.md" in await (await client.get("/docs/")).text()


# top at 80 columns on the simulated node ------------------------------------------------------


def test_top_once_at_80_columns_keeps_reasons_whole_and_every_job_identifiable(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`top --once --width 80` right after the simulated node starts: every row fits, no
    reason is cut inside a word (a shortened one keeps whole words of its long or short
    form), every GPU's job is shown as a piece of its name that belongs to no other job on
    the node (so it also works as a filter), the straggler of job 4242 is already marked
    (the first verdict is waited for), and the last lines say how to see the rest."""
    from exporter.cli import simulated_app
    from exporter.view.source import SimulatedNode
    from exporter.view.table import reason_forms
    from exporter.view.top import once

    node = SimulatedNode(simulated_app, 12)
    url = node.start()
    try:
        state = State()
        assert once(Endpoint(url), state, 1.0, 80) == 0
    finally:
        node.stop()
    out = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in out), out
    header = next(i for i, line in enumerate(out) if line.startswith(" GPU REGIME"))
    job_at, why_at = out[header].index("JOB"), out[header].index("WHY")
    rows = {r.gpu: r for r in state.view.rows}
    lines = out[header + 1:header + 1 + len(rows)]
    names = {r.job for r in rows.values() if r.job}
    assert len(names) >= 9 and any(len(n) > why_at - job_at for n in names)  # some shortened
    for text in lines:
        row = rows[text[:4].strip().rstrip("*")]
        why = text[why_at:].strip()
        reasons = row.reasons() or [row.why]
        words = {w for r in reasons for form in reason_forms(r) for w in form.split()}
        shown = re.sub(r" \+\d+$", "", why).removesuffix("~")
        assert shown and all(w in words for w in shown.split()), (text, reasons)
        job = text[job_at:why_at].strip()
        assert bool(job) == bool(row.job), text
        if row.job:
            owners = {n for n in names if job in n}
            assert owners == {row.job}, (text, owners)  # a piece of its own name only
            assert {r.job for r in arrange(rows.values(), "gpu", job)} == {row.job}
    assert any(line.startswith("  9* ") for line in lines), lines  # the first verdict
    assert "--width" in " ".join(out[-3:]) and "j/k" in " ".join(out[-3:])
