"""``make llama-server``, the visible step ``make test`` runs before pytest: one line when the
build is cached or cannot run, never minutes of silence."""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support import llamacpp


def _step(cache: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPU_GOODPUT_CACHE": str(cache), "PATH": path}
    return subprocess.run([sys.executable, "-m", "tests.support.llama_build"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def test_a_cached_build_is_announced_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / f"llama-{llamacpp.VERSION}"
    (root / "build" / "bin").mkdir(parents=True)
    (root / "build" / "bin" / "llama-server").write_text("")
    (root / llamacpp.DONE).write_text(llamacpp.VERSION)
    done = _step(tmp_path, os.environ["PATH"])
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        f"llama-server: cached at {root / 'build' / 'bin' / 'llama-server'}"]


def test_without_a_toolchain_it_says_the_tests_are_skipped(tmp_path: Path) -> None:
    done = _step(tmp_path, str(tmp_path))  # no cmake, no compiler on this PATH
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) == 1 and "missing cmake" in done.stdout
    assert "skipped" in done.stdout


def test_the_makefile_runs_it_before_pytest() -> None:
    dry = subprocess.run(["make", "-n", "--no-print-directory", "test"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert dry.index("tests.support.llama_build") < dry.index("-m pytest")


@contextmanager
def _index(body: bytes, name: str) -> Iterator[str]:
    """A PEP 503 simple index on loopback listing ``name`` (the sdist) with ``body``."""
    page = f'<a href="../../files/{name}#sha256=x">{name}</a>'.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = {f"/simple/{llamacpp.PROJECT}/": page, f"/files/{name}": body}
            data = found.get(self.path)
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()


def test_the_sdist_download_says_bytes_and_percent_and_checks_the_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fetched straight from the index pip is configured with (no pip resolver, no build
    backend), with bytes, percent and rate on the way, and refused when its digest is not
    the pinned one."""
    body = os.urandom(300_000)
    name = "llama_cpp_python-9.9.9.tar.gz"
    monkeypatch.setenv("GPU_GOODPUT_CACHE", str(tmp_path))
    with _index(body, name) as index:
        monkeypatch.setattr(llamacpp, "index_urls", lambda: [index])
        monkeypatch.setitem(llamacpp.SDIST_SHA256, "9.9.9", hashlib.sha256(body).hexdigest())
        said: list[str] = []
        path = llamacpp.sdist("9.9.9", progress=said.append)
        assert path.read_bytes() == body and not list(path.parent.glob("*.part"))
        assert said[0].startswith(f"downloading {name} (0.3 MiB) from 127.0.0.1:"), said
        assert re.fullmatch(r"  0\.3/0\.3 MiB \(100%\), [\d.]+ MiB/s, \d+ s", said[-1]), said
        url, _ = llamacpp._sdist_url(index, name)
        with pytest.raises(ValueError, match="is not the pinned"):
            llamacpp._download(url, None, tmp_path / "other.tar.gz", "0" * 64, said.append)
        assert not list(tmp_path.glob("other.tar.gz*"))


def test_pips_index_is_asked_before_pypi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://mirror.example/simple")
    urls = llamacpp.index_urls()
    assert "http://mirror.example/simple/" in urls and urls[-1] == "https://pypi.org/simple/"


def test_a_long_compile_says_which_file_it_is_still_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One big file can hold the build's percentage for minutes: a line comes anyway."""
    monkeypatch.setattr(llamacpp, "HEARTBEAT_SECONDS", 0.4)
    script = ("echo '[ 10%] Building CXX object src/CMakeFiles/llama.dir/llama-model.cpp.o'; "
              "sleep 1.5; echo '[ 20%] Linking CXX executable ../bin/llama-server'")
    said: list[str] = []
    with (tmp_path / "log").open("wb") as out:
        assert llamacpp._run_logged(["sh", "-c", script], out, said.append) == 0
    assert said[0] == "sh -c..." and re.fullmatch(r"  10% \(\d+ s\)", said[1]), said
    assert re.fullmatch(r"  still working at 10% \(\d+ s, on llama-model\.cpp\)", said[2]), said
    assert re.fullmatch(r"  20% \(\d+ s\)", said[-1]), said
    assert b"llama-model.cpp.o" in (tmp_path / "log").read_bytes()
