"""``top`` and the landing page fed hostile labels and hostile servers ([identity], issue
38): only printable text reaches a terminal, a trickling or oversized answer is given up in
one line within a bound, the node name is checked at start-up, and the landing page says
what a browser may do with it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pytest

from exporter.view import source
from exporter.view.rows import parse
from exporter.view.source import Endpoint
from exporter.view.table import frame
from tests.conftest import REPO

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"
"""Write "rm -rf ~" to the operator's clipboard."""
TITLE = "\x1b]0;owned\x07"
CLEAR = "\x1b[2J\x1b[H"
C1_CSI = "\x9b2J"
HOSTILE = f"""\
goodput_exporter_build_info{{node="n{CLEAR}",version="1{TITLE}",backend="nvml",\
python_version="3"}} 1
goodput_gpu_info{{gpu="0",node="n",name="H100{C1_CSI}"}} 1
goodput_gpu_up{{gpu="0",node="n",reason=""}} 1
goodput_gpu_regime{{gpu="0",node="n",regime="compute_bound"}} 1
goodput_gpu_job_info{{gpu="0",node="n",job_source="slurm",namespace="",job_id="j{OSC52}"}} 1
goodput_gpu_up{{gpu="1{CLEAR}",node="n",reason="x\u202eevil"}} 0
"""
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def _clean(text: str) -> bool:
    return not any(c in text for c in RAW)


def test_printable_shows_controls_escaped() -> None:
    from exporter.view.printable import printable

    assert printable(f"a{OSC52}b") == "a\\x1b]52;c;cm0gLXJmIH4K\\x07b"
    assert printable("\x9b\u202eé日\t") == "\\x9b\\u202eé日\\x09"
    assert printable(printable(CLEAR)) == printable(CLEAR)


def test_every_frame_line_is_printable() -> None:
    view = parse(HOSTILE)
    lines = frame(view, view.rows, 400, selected=0)
    text = "\n".join(lines)
    assert _clean(text), text
    assert "\\x1b]52" in text  # shown, escaped: the operator sees what was sent


@contextmanager
def serve(handle: Callable[[socket.socket], None]) -> Iterator[str]:
    """A one-thread HTTP server on loopback answering every connection with ``handle``."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def run() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            threading.Thread(target=_answer, args=(conn, handle, stop), daemon=True).start()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/metrics"
    finally:
        stop.set()
        thread.join(5)
        server.close()


def _answer(conn: socket.socket, handle: Callable[[socket.socket], None],
            stop: threading.Event) -> None:
    with conn:
        conn.recv(65536)
        with suppress(OSError):
            handle(conn)


def _send(body: str) -> Callable[[socket.socket], None]:
    data = body.encode()

    def handle(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                     + str(len(data)).encode() + b"\r\nConnection: close\r\n\r\n" + data)

    return handle


def _trickle(conn: socket.socket) -> None:
    """Headers, then one byte every 0.2 s for ever: every socket read succeeds in time."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                 b"Content-Length: 100000000\r\n\r\n")
    for _ in range(10_000):
        conn.sendall(b"#")
        time.sleep(0.2)


def _top(*args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "exporter", "top", *args],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    return done, time.monotonic() - started


def test_top_once_prints_no_escape_sequence() -> None:
    with serve(_send(HOSTILE)) as url:
        done, _ = _top("--once", "--url", url, "--interval", "0.1", "--width", "300")
    assert _clean(done.stdout + done.stderr), repr(done.stdout)
    assert "\\x1b]52;c;" in done.stdout and "\\x1b[2J" in done.stdout  # shown, escaped


def test_a_trickling_server_is_given_up_in_one_line() -> None:
    """On main this ran past 40 s; now the first read is given up at source.READ_DEADLINE."""
    with serve(_trickle) as url:
        done, took = _top("--once", "--url", url)
    assert done.returncode == 1
    assert took < source.READ_DEADLINE + 5, took
    assert not done.stdout  # no frame around the error
    errors = [line for line in done.stderr.splitlines() if "cannot read" in line]
    assert len(errors) == 1 and "no complete answer" in errors[0], done.stderr


def test_top_once_has_an_overall_deadline() -> None:
    """A server that answers every read, slowly, with GPUs that never settle: --deadline
    ends it."""
    body = HOSTILE.replace('regime="compute_bound"', 'regime="unknown"')

    def slow(conn: socket.socket) -> None:
        time.sleep(0.8)
        _send(body)(conn)

    with serve(slow) as url:
        done, took = _top("--once", "--url", url, "--interval", "0.1", "--deadline", "2")
    assert done.returncode in (0, 1) and "REGIME" in done.stdout, done.stderr
    assert took < 2 + 3, took
    assert _clean(done.stdout)


def test_an_oversized_answer_is_refused_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "MAX_BYTES", 1 << 20)
    with serve(_send("# " + "x" * (2 << 20) + "\n")) as url, pytest.raises(
        OSError, match="larger than 1 MiB"
    ):
        Endpoint(url).read()


def test_a_node_name_with_controls_is_refused_at_start() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", "--listen", "127.0.0.1:0",
         "--node-name", f"n{TITLE}"], capture_output=True, text=True, timeout=60,
        check=False, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and "node name" in done.stderr
    assert _clean(done.stderr)


@pytest.mark.parametrize("name", ["node-1.example", "GPU_NODE_7"])
def test_ordinary_node_names_are_taken(name: str) -> None:
    from exporter.wiring.config import build

    assert build({"node_name": name}).node_name == name


@pytest.mark.parametrize(
    "tree",
    [
        {"node_name": "a b"},
        {"node_name": "-x"},
        {"serving": {"targets": [{"url": "http://h/", "model": f"m{OSC52}"}]}},
        {"serving": {"targets": [{"url": "http://h/", "gpus": ["0\x1b"]}]}},
        {"serving": {"targets": [{"url": f"http://h/metrics{CLEAR}"}]}},
    ],
)
def test_label_settings_are_checked_at_start(tree: dict[str, Any]) -> None:
    from exporter.wiring.config import ConfigError, build

    with pytest.raises(ConfigError) as err:
        build(tree)
    assert _clean(str(err.value))


async def test_the_landing_page_says_what_a_browser_may_do(sim: Any) -> None:
    from tests.test_server import client_for

    client, _ = await client_for(sim)
    try:
        page = await client.get("/")
        csp = page.headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
        assert "script-src" not in csp  # no script at all
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        assert page.headers["X-Frame-Options"] == "DENY"
    finally:
        await client.close()


# --- every byte top writes is printable, whatever the server ([identity-2], issue 47) -------


def _printable_only(text: str) -> bool:
    """Nothing but printable characters and newlines: no escape, no control, no bidi."""
    return all(c == "\n" or c.isprintable() for c in text)


def _raw(data: bytes) -> Callable[[socket.socket], None]:
    def handle(conn: socket.socket) -> None:
        conn.sendall(data)

    return handle


BAD_LABELS = f'goodput_gpu_up{{gpu="0",node="n{OSC52}" {TITLE}}} 1\n'.encode()
"""A line the exposition parser refuses, quoting it raw in its message (on main:
``Invalid labels: ...`` with the escape sequences, on stderr)."""


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
        + str(len(BAD_LABELS)).encode() + b"\r\nConnection: close\r\n\r\n" + BAD_LABELS,
        f"HTTP/1.1 2{OSC52}{TITLE} OK\r\n\r\n".encode(),  # BadStatusLine quotes it
        f"{CLEAR}{TITLE}\r\n\r\n".encode(),
        f"HTTP/1.1 404 {OSC52}\r\nContent-Length: 0\r\n\r\n".encode(),
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n\xff\x9b\x1b",
    ],
    ids=["parser", "status-line", "garbage", "reason", "bytes"],
)
def test_top_once_writes_only_printable_text_on_both_streams(answer: bytes) -> None:
    with serve(_raw(answer)) as url:
        done, _ = _top("--once", "--url", url, "--interval", "0.1", "--deadline", "5")
    assert _printable_only(done.stdout), repr(done.stdout)
    assert _printable_only(done.stderr), repr(done.stderr)


def _four_megabytes() -> str:
    """The simulated node's exposition with its GPUs repeated under new indices, to just
    under ``source.MAX_BYTES``: about 1,200 GPUs, 4 MB."""
    import re

    lines = [line for line in (REPO / "tests" / "golden" / "simulated-node.prom")
             .read_text().splitlines() if line and not line.startswith("#")]
    per_gpu = [line for line in lines if 'gpu="' in line]
    out = [line for line in lines if 'gpu="' not in line]
    size, k = 0, 0
    while size < source.MAX_BYTES - 100_000:
        def renumber(m: re.Match[str], shift: int = 12 * k) -> str:
            return f'gpu="{int(m.group(1)) + shift}"'

        for line in per_gpu:
            out.append(re.sub(r'gpu="(\d+)"', renumber, line))
            size += len(out[-1]) + 1
        k += 1
    return "\n".join(out) + "\n"


def test_top_once_deadline_covers_parsing_a_4mb_answer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On main the deadline covered the reads only: a 3.96 MB exposition took 22-35 s to
    parse and print on a loaded machine against a 20 s deadline. Parsing is slowed by 3 s
    here, as such a machine would, so the bound is tested the same everywhere."""
    from exporter.view import top

    body = _four_megabytes()
    assert 4_000_000 < len(body) <= source.MAX_BYTES
    real = top.parse  # type: ignore[attr-defined]

    def slow(text: str, rates: object = None) -> object:
        time.sleep(3)
        return real(text, rates)  # type: ignore[arg-type]

    monkeypatch.setattr(top, "parse", slow)
    with serve(_send(body)) as url:
        started = time.monotonic()
        code = top.once(Endpoint(url), top.State(), 0.1, 120, deadline=1.5)
        took = time.monotonic() - started
    out = capsys.readouterr()
    assert took < 1.5 + 0.5, took
    assert code == 1 and "deadline" in out.err and not out.out
    assert _printable_only(out.out) and _printable_only(out.err)


def test_live_top_holds_at_most_one_read_in_flight() -> None:
    """Against a trickling server, each refresh used to leave one more thread and socket
    behind (about 600 an hour); now a read still going is waited on, not repeated."""
    connections = []

    def trickle(conn: socket.socket) -> None:
        connections.append(conn)
        _trickle(conn)

    with serve(trickle) as url:
        endpoint = Endpoint(url)
        earlier = {t for t in threading.enumerate() if t.name == "top-read"}
        for _ in range(4):
            with pytest.raises(OSError, match="no complete answer"):
                endpoint.read(time.monotonic() + 0.3)
        assert len(connections) == 1
        reading = [t for t in threading.enumerate() if t.name == "top-read" and t not in earlier]
        assert len(reading) == 1
