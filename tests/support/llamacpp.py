"""A real llama-server for the tests: built from source on CPU, fed a tiny random model.

The llama.cpp source is the copy vendored in PyPI's ``llama-cpp-python`` sdist (the local
package index serves it, so no git or network beyond pip is needed). The build lives outside
the repository, keyed by the sdist's version, and a finished build is reused:
``$GPU_GOODPUT_CACHE`` (default ``~/.cache/gpu-goodput-exporter``)/``llama-<version>/``.
``scripts/llama_server.sh`` is the same build for humans (and CUDA).

The model is a two-layer llama with random weights and a byte-level vocabulary, written with
the sdist's own ``gguf-py``: llama-server loads it in a blink and generates (nonsense) tokens,
which is all a token-accounting test needs.
"""

from __future__ import annotations

import fcntl
import hashlib
import http.server
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from testkit.harness import free_port, stop_process

VERSION = "0.3.36"
"""The ``llama-cpp-python`` sdist whose vendored llama.cpp is built (pinned: the live
fixture and the engine table were checked against it)."""

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    # -O0, not Release's -O3: the tests' model is two layers 64 wide, so the server's speed
    # is irrelevant (the serving tests take 16.9 s against 16.5 s at -O1), and the compile
    # is what a first `make test` waits for. The seven heaviest files take 70 s at -O0
    # against 152 s at -O1 (mtmd's clip.cpp 20 s against 70 s), docs/benchmarks.md.
    # scripts/llama_server.sh, built for real GPUs, keeps -O3.
    "-DCMAKE_C_FLAGS_RELEASE=-O0 -DNDEBUG",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # would download the web UI at configure time
    "-DGGML_NATIVE=OFF",  # a binary that runs on any x86-64 the cache is copied to
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary
)
"""Keep in step with scripts/llama_server.sh (but for the optimisation level)."""

DONE = ".build-ok"


class BuildUnavailable(RuntimeError):
    """No toolchain to build llama-server with (the only reason a test may skip)."""


def cache_root() -> Path:
    env = os.environ.get("GPU_GOODPUT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gpu-goodput-exporter"


def build_root(version: str = VERSION) -> Path:
    return cache_root() / f"llama-{version}"


def missing_toolchain() -> str:
    """Why llama-server cannot be built here ("" when cmake and a C++ compiler exist)."""
    missing = [tool for tool in ("cmake",) if shutil.which(tool) is None]
    if not any(shutil.which(cxx) for cxx in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler (c++, g++ or clang++)")
    return f"missing {', '.join(missing)}" if missing else ""


SDIST_SHA256 = {"0.3.36": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"}
"""The sdist's digest as PyPI lists it: a download from any index or mirror is checked."""
PROJECT = "llama-cpp-python"
HEARTBEAT_SECONDS = 20.0
"""A download or build step that printed nothing for this long says where it is (a first
``make test`` must never look hung; the bar is a line at least every 30 s)."""
SKIPPED_MEMBERS = ("/.git/", "/vendor/llama.cpp/docs/", "/vendor/llama.cpp/models/",
                   "/vendor/llama.cpp/media/", "/vendor/llama.cpp/benches/")
"""Parts of the sdist the build never reads (130 of its 216 MB): not unpacked."""

Progress = Callable[[str], None]


def sdist(version: str = VERSION, progress: Progress | None = None) -> Path:
    """The ``llama-cpp-python`` sdist, downloaded once into the cache: straight from the
    package index pip is configured with (bytes, percent and rate shown, digest checked),
    else with ``pip download``."""
    folder = cache_root() / "sdist"
    path = folder / f"llama_cpp_python-{version}.tar.gz"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _text: None)
    for index in index_urls():
        try:
            url, size = _sdist_url(index, path.name)
        except (OSError, ValueError, KeyError):
            continue
        try:
            _download(url, size, path, SDIST_SHA256.get(version, ""), say)
            return path
        except (OSError, ValueError) as exc:
            say(f"download from {url} failed ({exc}); trying the next source")
    say(f"no index listed {path.name}; asking pip to download it")
    with _ticking(say, "pip download"):
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "-d", str(folder), f"{PROJECT}=={version}"],
            check=True, capture_output=True, timeout=1800,
        )  # fmt: skip
    return path


def index_urls() -> list[str]:
    """pip's index and extra indexes (its configuration, then the environment), PyPI last."""
    found: list[str] = []
    try:
        listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                                capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        listed = ""
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(("index-url", "index_url")):
            found += value.strip().strip("'\"").split()
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        found += os.environ.get(name, "").split()
    found.append("https://pypi.org/simple/")
    return list(dict.fromkeys(u.rstrip("/") + "/" for u in found if u))


def _sdist_url(index: str, filename: str) -> tuple[str, int | None]:
    """URL (and size, when the index says) of ``filename`` on a PEP 503/691 simple index."""
    page = urllib.parse.urljoin(index, f"{PROJECT}/")
    request = urllib.request.Request(page, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        body = resp.read(8 << 20).decode("utf-8", "replace")
        json_page = "json" in (resp.headers.get("Content-Type") or "")
    if json_page:
        for entry in json.loads(body)["files"]:
            if entry["filename"] == filename:
                return urllib.parse.urljoin(page, entry["url"]), entry.get("size")
        raise KeyError(filename)
    for href in re.findall(r'href="([^"]+)"', body):
        if urllib.parse.urlsplit(href).path.rsplit("/", 1)[-1] == filename:
            return urllib.parse.urljoin(page, href.split("#", 1)[0]), None
    raise KeyError(filename)


def _download(url: str, size: int | None, path: Path, sha256: str, say: Progress) -> None:
    """``url`` to ``path``, saying bytes, percent, rate and elapsed time every few seconds;
    refused unless its digest is ``sha256`` (when known)."""
    started = last = time.monotonic()
    digest = hashlib.sha256()
    partial = path.with_name(path.name + ".part")
    with urllib.request.urlopen(url, timeout=60) as resp, partial.open("wb") as out:
        total = int(resp.headers.get("Content-Length") or size or 0)
        host = urllib.parse.urlsplit(url).netloc or "a local index"
        say(f"downloading {path.name} ({_mib(total)}) from {host}")
        got = 0
        while chunk := resp.read(1 << 16):
            out.write(chunk)
            digest.update(chunk)
            got += len(chunk)
            now = time.monotonic()
            if now - last >= 5 or (total and got >= total):
                last = now
                rate = got / max(now - started, 1e-3) / 2**20
                say(f"  {_bytes_done(got, total)}, {rate:.1f} MiB/s, {now - started:.0f} s")
    if sha256 and digest.hexdigest() != sha256:
        partial.unlink()
        raise ValueError(f"sha256 {digest.hexdigest()} is not the pinned {sha256}")
    partial.replace(path)


def _mib(count: float) -> str:
    return f"{count / 2**20:.1f} MiB" if count else "size unknown"


def _bytes_done(got: int, total: int) -> str:
    if not total:
        return _mib(got)
    return f"{got / 2**20:.1f}/{total / 2**20:.1f} MiB ({100 * got / total:.0f}%)"


@contextmanager
def _ticking(say: Progress, what: str) -> Iterator[None]:
    """Say ``still <what> (N s)`` every HEARTBEAT_SECONDS until the block ends."""
    started, stop = time.monotonic(), threading.Event()

    def tick() -> None:
        while not stop.wait(HEARTBEAT_SECONDS):
            say(f"  still {what} ({time.monotonic() - started:.0f} s)")

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()


def llama_cpp_source(version: str = VERSION, progress: Progress | None = None) -> Path:
    """The sdist's vendored llama.cpp tree, unpacked once into the build root (without the
    docs, vocabularies and history the build never reads)."""
    root = build_root(version)
    src = root / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if not (src / "CMakeLists.txt").exists():
        archive = sdist(version, progress)
        root.mkdir(parents=True, exist_ok=True)
        if progress:
            progress(f"unpacking {archive.name}")
        with tarfile.open(archive) as tar:
            wanted = [m for m in tar if not any(s in m.name + "/" for s in SKIPPED_MEMBERS)]
            tar.extractall(root, members=wanted, filter="data")
    return src


def gguf_py(version: str = VERSION) -> Path:
    """The sdist's ``gguf-py`` folder (put on sys.path; it needs numpy)."""
    return llama_cpp_source(version) / "gguf-py"


def server_binary(version: str = VERSION, log: Path | None = None,
                  progress: Progress | None = None) -> Path:
    """Path of a built ``llama-server``: reused when a previous build finished, otherwise
    configured and built now (minutes on two cores). Concurrent callers wait on a lock
    instead of building twice. Raises :class:`BuildUnavailable` without a toolchain.
    ``progress`` is told of each step and each new build percentage (``make test`` prints
    them, so the build is never a silent wait)."""
    root = build_root(version)
    binary = root / "build" / "bin" / "llama-server"
    if (root / DONE).exists() and binary.exists():
        return binary
    why = missing_toolchain()
    if why:
        raise BuildUnavailable(why)
    root.mkdir(parents=True, exist_ok=True)
    log = log or root / "build.log"
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / DONE).exists() and binary.exists():
            return binary
        src = llama_cpp_source(version, progress)
        jobs = str(build_jobs())
        with log.open("ab") as out:
            for cmd in (
                ["cmake", "-S", str(src), "-B", str(root / "build"), *CMAKE_FLAGS],
                ["cmake", "--build", str(root / "build"), "--target", "llama-server", "-j", jobs],
            ):
                out.write(f"# {' '.join(cmd)}\n".encode())
                out.flush()
                done = _run_logged(cmd, out, progress)
                if done != 0:
                    raise RuntimeError(f"{cmd[:2]} failed ({done}); see {log}")
        (root / DONE).write_text(version + "\n")
    return binary


def build_jobs() -> int:
    """Compilers to run at once: the cores this process may use (a container's or
    ``taskset``'s share, not the host's)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return os.cpu_count() or 2


def compiler_cache() -> str:
    """``ccache`` when installed: llama.cpp's CMake (GGML_CCACHE, on by default) compiles
    through it, so a rebuild after the cache folder was wiped costs seconds, not minutes."""
    return "ccache" if shutil.which("ccache") else ""


PERCENT = re.compile(rb"^\[\s*(\d+)%\]")
COMPILING = re.compile(rb"(?:Building \w+ object|Linking \w+ \w+) (\S+)")


def _run_logged(cmd: list[str], out: IO[bytes], progress: Progress | None) -> int:
    """Run ``cmd`` into the log; tell ``progress`` of the step, each new percentage with
    the time so far, and, when nothing moved for HEARTBEAT_SECONDS, which file it is still
    on (one big file can hold a percentage for minutes on a busy machine)."""
    if progress is None:
        return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
    started = said = time.monotonic()
    progress(f"{cmd[0]} {cmd[1]}...")
    lines: queue.Queue[bytes | None] = queue.Queue()
    seen, current = "", ""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        stdout = proc.stdout
        assert stdout is not None

        def pump() -> None:
            for raw in stdout:
                lines.put(raw)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        while True:
            try:
                raw = lines.get(timeout=max(said + HEARTBEAT_SECONDS - time.monotonic(), 0.1))
            except queue.Empty:
                said = time.monotonic()
                where = f" at {seen}%" if seen else ""
                doing = f", on {current}" if current else ""
                progress(f"  still working{where} ({said - started:.0f} s{doing})")
                continue
            if raw is None:
                break
            out.write(raw)
            if step := COMPILING.search(raw):
                current = Path(step.group(1).decode(errors="replace")).name.removesuffix(".o")
            match = PERCENT.match(raw)
            if match and match.group(1).decode() != seen:
                seen, said = match.group(1).decode(), time.monotonic()
                progress(f"  {seen}% ({said - started:.0f} s)")
        return proc.wait()


# --- the model ---------------------------------------------------------------------------------

N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_FF = 128
N_CTX_TRAIN = 2048
WORDS = ("the", "a", "and", "of", "to", "in", "is", "it", "that", "token", "gpu", "cache")


def tiny_vocab() -> tuple[list[str], list[float], list[int]]:
    """A sentencepiece ("llama") vocabulary: unk/bos/eos, all 256 byte pieces (so any text
    tokenizes and the newline token exists), the letters and a few words."""
    from gguf import TokenType

    tokens = ["<unk>", "<s>", "</s>"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TokenType.BYTE] * 256
    pieces = ["\u2581", *"abcdefghijklmnopqrstuvwxyz", *(f"\u2581{w}" for w in WORDS)]
    tokens += pieces
    types += [TokenType.NORMAL] * len(pieces)
    # Longer pieces score higher so the tokenizer merges letters into words.
    scores = [0.0] * (3 + 256) + [float(len(p)) - 100.0 for p in pieces]
    return tokens, scores, [int(t) for t in types]


def write_tiny_gguf(path: Path, version: str = VERSION, seed: int = 0) -> Path:
    """A random-weight llama (2 layers, width 64) with :func:`tiny_vocab`, as GGUF F32."""
    source = str(gguf_py(version))
    if source not in sys.path:
        sys.path.insert(0, source)
    import gguf
    import numpy as np

    tokens, scores, types = tiny_vocab()
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name("goodput-tiny-random")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    # numpy shapes are GGML's ne reversed: (rows, columns) = (out, in).
    writer.add_tensor("token_embd.weight", weight(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        blk = f"blk.{i}"
        writer.add_tensor(f"{blk}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{blk}.{name}.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(f"{blk}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"{blk}.ffn_gate.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"{blk}.ffn_up.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"{blk}.ffn_down.weight", weight(N_EMBD, N_FF))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", weight(n_vocab, N_EMBD))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# --- the server --------------------------------------------------------------------------------


@dataclass
class LlamaServer:
    """A running llama-server on loopback; :meth:`restart` keeps the port."""

    binary: Path
    model: Path
    port: int
    log: Path
    args: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(self.binary), "-m", str(self.model), "--host", "127.0.0.1",
            "--port", str(self.port), "--metrics", "-np", "4", "-c", "2048", "-t", "1",
            *self.args,
        ]  # fmt: skip

    def start(self, timeout: float = 60.0) -> None:
        with self.log.open("ab") as out:
            out.write(f"# {' '.join(self.command())}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1.0) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.HTTPError):
                pass  # still loading (503) or not listening yet
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"llama-server not healthy after {timeout:.0f}s; log {self.log}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout=10.0)
            self.proc = None

    def restart(self, timeout: float = 60.0) -> None:
        self.stop()
        self.start(timeout)

    def completion(self, prompt: str, n_predict: int, **extra: Any) -> dict[str, Any]:
        """One non-streaming ``/completion``; the response JSON."""
        body = {"prompt": prompt, "n_predict": n_predict, **extra}
        request = urllib.request.Request(
            self.url + "/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60.0) as resp:
            result: dict[str, Any] = json.loads(resp.read())
        return result

    def metrics(self) -> tuple[str, Mapping[str, str]]:
        """llama-server's own /metrics text and response headers."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=5.0) as resp:
            return resp.read().decode(), dict(resp.headers.items())


@contextmanager
def llama_server(
    binary: Path, model: Path, log: Path, *args: str, port: int | None = None
) -> Iterator[LlamaServer]:
    """llama-server with ``--metrics -np 4 -c 2048`` on a free loopback port, healthy."""
    server = LlamaServer(binary, model, port or free_port(), log, args)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class MetricsGate:
    """A pass-through for ``GET /metrics`` (body and the headers a scraper reads) that a test
    can shut: shut, it answers 503, so the scraper sees nothing of what happens meanwhile
    (a restart, say) and must make sense of its next reading on its own."""

    FORWARDED = ("Content-Type", "Process-Start-Time-Unix")

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.open = threading.Event()
        self.open.set()
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if not gate.open.is_set():
                    self.send_error(503, "gate shut")
                    return
                try:
                    with urllib.request.urlopen(gate.upstream + self.path, timeout=5.0) as resp:
                        status, data, headers = resp.status, resp.read(), resp.headers
                except urllib.error.HTTPError as exc:
                    status, data, headers = exc.code, exc.read(), exc.headers
                except OSError as exc:
                    self.send_error(502, str(exc))
                    return
                self.send_response(status)
                for name in gate.FORWARDED:
                    if headers.get(name) is not None:
                        self.send_header(name, headers[name])
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> MetricsGate:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# --- a live capture ----------------------------------------------------------------------------

CAPTURE_PROMPT = "the gpu cache is a token of the cache and the gpu is in it " * 3


def capture(folder: Path, version: str = VERSION) -> tuple[Path, Path]:
    """Drive a fresh llama-server (12 concurrent requests, then 3 repeats of one prompt
    served from the prompt cache) and save its /metrics text, prefixed with the fixtures'
    ``# source:`` line, as ``llamacpp-<version>-live.txt`` and its response headers plus
    the clients' token sums as the ``.json`` next to it."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    options = {"cache_prompt": True, "ignore_eos": True, "temperature": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        model = write_tiny_gguf(Path(tmp) / "tiny.gguf", version)
        with llama_server(server_binary(version), model, Path(tmp) / "server.log") as server:
            prompts = [f"{CAPTURE_PROMPT}{i}" for i in range(12)]
            with ThreadPoolExecutor(4) as pool:
                results = list(pool.map(lambda p: server.completion(p, 12, **options), prompts))
            results += [server.completion(CAPTURE_PROMPT, 12, **options) for _ in range(3)]
            text, headers = server.metrics()
    sums = {"generation": 0, "prompt": 0, "prompt_cached": 0, "requests": len(results)}
    for result in results:
        sums["generation"] += int(result["tokens_predicted"])
        sums["prompt"] += int(result["timings"]["prompt_n"])
        sums["prompt_cached"] += int(result["timings"]["cache_n"])
    txt, meta = folder / f"llamacpp-{version}-live.txt", folder / f"llamacpp-{version}-live.json"
    source = (
        f"# source: llama-server built from the llama.cpp vendored in PyPI llama-cpp-python "
        f"{version} (sdist), CPU, --metrics -np 4 -c 2048, tiny random llama "
        f"(tests/support/llamacpp.py capture()); GET /metrics after {len(results)} "
        "/completion requests, body unchanged below this line\n"
    )
    txt.write_text(source + text)
    record = {"headers": dict(headers), "clients": sums}
    meta.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return txt, meta


if __name__ == "__main__":
    # python -m tests.support.llamacpp: refresh the live capture in tests/fixtures.
    from testkit.harness import REPO

    for written in capture(REPO / "tests" / "fixtures" / "serving-metrics"):
        print(written)
