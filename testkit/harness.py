"""Process and HTTP plumbing shared by the bench scripts and the tests.

The one place that starts the daemon (``python -m exporter``) as a subprocess on loopback:
:class:`DaemonProcess` (bench scripts: keeps the process, its CPU and RSS) and :func:`daemon`
(tests: a context manager yielding the base URL). ``tests/support/daemon.py`` re-exports them.

Standard library only (PyYAML is imported when a config is written), so it imports on the GPU
machine before the exporter's own dependencies are checked. The bench scripts (run as modules
from the repository root) and the tests both import it as ``testkit.harness``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]


# --- HTTP -------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def wait_http(url: str, timeout: float = 20.0) -> None:
    """Poll ``url`` until it answers 200 (raises TimeoutError after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if http_get(url, timeout=1.0)[0] == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not ready after {timeout}s")
        time.sleep(0.1)


# --- /proc ------------------------------------------------------------------------------------

def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` from /proc (Linux), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def proc_rss_bytes(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` from /proc/<pid>/status, in bytes."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def proc_smaps_rollup(pid: int) -> dict[str, int]:
    """Rss, Pss, Pss_Anon, Pss_File, ... of ``pid`` from /proc/<pid>/smaps_rollup, in bytes."""
    out: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return out
    for line in text.splitlines()[1:]:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[key.strip()] = int(parts[0]) * 1024
    return out


# --- commands ---------------------------------------------------------------------------------

def run_cmd(cmd: list[str], timeout: float = 20.0) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        return proc.returncode, proc.stdout + proc.stderr
    except FileNotFoundError:
        return 127, f"{cmd[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, f"{cmd[0]}: timed out after {timeout}s"


def parse_smi_csv(text: str, fields: Iterable[str]) -> dict[str, Any]:
    """One ``--format=csv,noheader,nounits`` line to {field: float or str}; N/A dropped."""
    names = list(fields)
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    values = [v.strip() for v in line.split(",")]
    out: dict[str, Any] = {}
    if len(values) != len(names):
        return out
    for name, value in zip(names, values, strict=True):
        if not value or value.startswith(("[N/A]", "N/A", "[Not Supported]")):
            continue
        try:
            out[name] = float(value)
        except ValueError:
            out[name] = value
    return out


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment with the repo root first on PYTHONPATH (so ``python -m exporter`` runs
    this checkout) and unbuffered output."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> tuple[int | None, bool]:
    """SIGTERM, then SIGKILL after ``timeout``; returns (exit code, killed)."""
    killed = False
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
            killed = True
    return proc.returncode, killed


# --- the daemon -------------------------------------------------------------------------------

class DaemonStartError(RuntimeError):
    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class DaemonProcess:
    """``python -m exporter --listen 127.0.0.1:<port> *args`` from this checkout.

    :meth:`start` waits until ``ready_path`` answers 200 (``/readyz``: a GPU source has polled;
    ``/healthz``: the process serves). A 404 on ``ready_path`` falls back to ``/metrics``.
    ``config`` (a dict) is written to a temporary YAML file passed as ``--config``.
    """

    def __init__(self, *args: str, port: int | None = None, python: str = sys.executable,
                 log: IO[Any] | Path | None = None, env: Mapping[str, str] | None = None,
                 config: Mapping[str, Any] | None = None) -> None:
        self.args = list(args)
        self.port = port or free_port()
        self.python = python
        self.log = log
        self.env = dict(env or {})
        self.config = dict(config or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_seconds: float | None = None
        self._log_file: IO[Any] | None = None
        self._config_path: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        cmd = [*shlex.split(self.python), "-m", "exporter", "--listen", f"127.0.0.1:{self.port}",
               *self.args]
        if self._config_path:
            cmd += ["--config", self._config_path]
        return cmd

    def start(self, timeout: float = 45.0, ready_path: str = "/readyz",
              keep_unready: bool = False) -> None:
        """Start and wait for readiness; raises :class:`DaemonStartError` (process stopped).
        With ``keep_unready``, a daemon still running but not ready after ``timeout`` is kept
        (``ready_seconds`` stays None) instead."""
        if not port_free(self.port):  # someone else's daemon would answer our readiness probe
            self.port = free_port()
        if self.config:
            import yaml

            fd, self._config_path = tempfile.mkstemp(prefix="goodput-", suffix=".yaml")
            with os.fdopen(fd, "w") as fh:
                yaml.safe_dump(self.config, fh)
        out: IO[Any] | int
        if isinstance(self.log, Path):
            self._log_file = out = self.log.open("ab")
        elif self.log is not None:
            out = self.log
            self.log.write(f"# --- {' '.join(self.command())}\n")
            self.log.flush()
        else:
            out = subprocess.DEVNULL
        started = time.monotonic()
        self.proc = subprocess.Popen(self.command(), cwd=REPO, stdout=out,
                                     stderr=subprocess.STDOUT, env=child_env(self.env))
        last = ""
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise DaemonStartError(f"daemon exited with {code} at start", code)
            try:
                status, body = http_get(self.url + ready_path, timeout=1.0)
            except OSError:
                time.sleep(0.2)
                continue
            if status == 200 or (status == 404 and http_get(self.url + "/metrics")[0] == 200):
                self.ready_seconds = time.monotonic() - started
                return
            last = f"{status} {body.strip()[:200]}"
            time.sleep(0.2)
        if keep_unready and self.alive():
            return
        self.stop()
        raise DaemonStartError(f"not ready after {timeout:.0f}s ({last or 'no answer'})")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float | None:
        return proc_cpu_seconds(self.proc.pid) if self.proc and self.alive() else None

    def rss(self) -> dict[str, int]:
        return proc_rss_bytes(self.proc.pid) if self.proc and self.alive() else {}

    def stop(self, timeout: float = 10.0) -> tuple[int | None, bool]:
        result: tuple[int | None, bool] = (None, False)
        if self.proc is not None:
            result = stop_process(self.proc, timeout)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._config_path:
            Path(self._config_path).unlink(missing_ok=True)
            self._config_path = None
        return result


@contextmanager
def daemon(*args: str, log: Path | None = None, env: dict[str, str] | None = None,
           ready_path: str = "/healthz", timeout: float = 30.0) -> Iterator[str]:
    """Start the daemon with ``args``; yields its base URL once ``ready_path`` answers."""
    proc = DaemonProcess(*args, log=log, env=env)
    proc.start(timeout=timeout, ready_path=ready_path)
    try:
        yield proc.url
    finally:
        proc.stop()


@contextmanager
def module_daemon(module: str, *args: str, timeout: float = 30.0,
                  root: Path = REPO) -> Iterator[str]:
    """``python -m <module> --listen 127.0.0.1:<free port> ARGS`` run in ``root`` (a scratch
    checkout with a test-only collector in its registry: tests/support/scratch.py); yields
    its base URL once ``/readyz`` answers 200."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--listen", f"127.0.0.1:{port}", *args],
        cwd=root, env=child_env(None if root == REPO else {"PYTHONPATH": str(root)}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/readyz", timeout=timeout)
        yield url
    finally:
        stop_process(proc)


class LoggedServer:
    """A server process on loopback with its output in a log file: started, waited for
    until ``ready_url`` answers (stopped again if it never does), stopped with SIGTERM then
    SIGKILL and its log closed. Prometheus, VictoriaMetrics and vmalert share it."""

    port: int
    url: str

    def _launch(self, argv: list[str], log_path: Path, ready_url: str, timeout: float) -> None:
        self.log = log_path.open("ab")
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_http(ready_url, timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        stop_process(self.process, timeout=30)
        self.log.close()


def require(binary: str) -> str:
    """The path of an installed server binary, or a one-line reason to install it."""
    path = shutil.which(binary)
    if path is None:
        raise RuntimeError(f"{binary} is not installed (run .ci/run or apt-get install it)")
    return path
