"""[footprint] side by side: this exporter and nvitop-exporter on the same GPU, same poll
interval, scraped every 1 s and every 15 s (Prometheus-style); CPU, RSS, scrape latency,
body bytes and series count of each, to JSON + markdown.

One command on the GPU machine (nvitop and nvitop-exporter installed or on PYTHONPATH, e.g.
from the carried wheels; no network needed)::

    PYTHONUNBUFFERED=1 python3 -m bench.footprint.side_by_side --out "$OUT" \
        --phases 1:90,15:90 --load gemm

Both exporters run for the whole measurement; each phase ``PERIOD:SECONDS`` scrapes both
every PERIOD seconds for SECONDS (alternating which goes first). CPU is the share of one core
from /proc/<pid>/stat (utime+stime, the process and its children) over the phase; RSS is
VmRSS and /proc/<pid>/smaps_rollup at the end of the phase; latency is request to last byte on
a fresh loopback connection, plain text. ``--simulate`` runs this exporter on its simulated
node and skips nvitop-exporter when it cannot start (pipeline check only).
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from bench.gpu.workloads.core import NO_MULTICAST, command
from testkit.harness import (
    REPO,
    DaemonProcess,
    DaemonStartError,
    child_env,
    free_port,
    proc_cpu_seconds,
    proc_rss_bytes,
    proc_smaps_rollup,
    run_cmd,
    stop_process,
    wait_http,
)

PLAIN = {"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "identity"}
GZIP = {"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "gzip"}


# --- pure helpers -----------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100.0 * len(ordered) - 1e-9)))
    return ordered[rank - 1]


def count_series(body: str) -> tuple[int, int]:
    """(samples, families) in a text exposition, parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    families = 0
    samples = 0
    for family in text_string_to_metric_families(body):
        families += 1
        samples += len(family.samples)
    return samples, families


def parse_phases(text: str) -> list[tuple[float, float]]:
    """``"1:90,15:90"`` -> [(1.0, 90.0), (15.0, 90.0)]."""
    out = []
    for part in text.split(","):
        if part.strip():
            period, _, seconds = part.partition(":")
            out.append((float(period), float(seconds)))
    return out


def children_of(pid: int) -> list[int]:
    """Descendant pids of ``pid`` (from /proc/*/stat's ppid)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    out, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        out += kids
        frontier += kids
    return out


def tree_cpu_seconds(pid: int) -> float | None:
    own = proc_cpu_seconds(pid)
    if own is None:
        return None
    return own + sum(proc_cpu_seconds(c) or 0.0 for c in children_of(pid))


# --- scraping ---------------------------------------------------------------------------------

def scrape(port: int, headers: Mapping[str, str], timeout: float = 10.0
           ) -> tuple[float, int, bytes, str]:
    """(seconds, status, body, content-encoding) of GET /metrics on a fresh connection."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/metrics", headers=dict(headers))
        resp = conn.getresponse()
        body = resp.read()
        elapsed = time.perf_counter() - t0
        return elapsed, resp.status, body, resp.getheader("Content-Encoding") or ""
    finally:
        conn.close()


class Target:
    """One exporter process under measurement."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pid: int | None = None
        self.port = 0
        self.error: str | None = None
        self.command: list[str] = []
        self.latencies: list[float] = []
        self.body_bytes: list[int] = []
        self.failures = 0
        self.cpu0: float | None = None
        self.t0 = 0.0
        self.rss_max = 0
        self.last_body = b""

    def alive(self) -> bool:
        return self.pid is not None and proc_cpu_seconds(self.pid) is not None

    def begin_phase(self) -> None:
        self.latencies, self.body_bytes, self.failures, self.rss_max = [], [], 0, 0
        self.cpu0 = tree_cpu_seconds(self.pid) if self.pid else None
        self.t0 = time.monotonic()

    def scrape_once(self) -> None:
        if self.pid is None:
            return
        try:
            seconds, status, body, _ = scrape(self.port, PLAIN)
        except (OSError, http.client.HTTPException):
            self.failures += 1
            return
        if status != 200:
            self.failures += 1
            return
        self.latencies.append(seconds)
        self.body_bytes.append(len(body))
        self.last_body = body
        self.rss_max = max(self.rss_max, proc_rss_bytes(self.pid).get("VmRSS", 0))

    def end_phase(self) -> dict[str, Any]:
        if self.pid is None:
            return {"error": self.error or "not running"}
        wall = time.monotonic() - self.t0
        cpu1 = tree_cpu_seconds(self.pid)
        out: dict[str, Any] = {"scrapes": len(self.latencies), "failures": self.failures,
                               "wall_seconds": round(wall, 2)}
        if self.cpu0 is not None and cpu1 is not None and wall > 0:
            out["cpu_seconds"] = round(cpu1 - self.cpu0, 3)
            out["cpu_percent_of_core"] = round(100.0 * (cpu1 - self.cpu0) / wall, 3)
        lat = [x * 1000.0 for x in self.latencies]
        if lat:
            out.update(latency_ms_p50=round(statistics.median(lat), 3),
                       latency_ms_p99=round(percentile(lat, 99) or 0.0, 3),
                       latency_ms_max=round(max(lat), 3),
                       latency_ms_mean=round(statistics.fmean(lat), 3))
        if self.body_bytes:
            out["body_bytes"] = int(statistics.median(self.body_bytes))
            try:
                samples, families = count_series(self.last_body.decode("utf-8", "replace"))
                out.update(series=samples, families=families)
            except ValueError as exc:
                out["series_error"] = str(exc)[:200]
            try:
                _, code, zbody, encoding = scrape(self.port, GZIP)
                out["gzip_honoured"] = code == 200 and encoding == "gzip"
                out["gzip_body_bytes"] = (len(zbody) if encoding == "gzip"
                                          else len(gzip.compress(zbody)))
            except (OSError, http.client.HTTPException):
                pass
        rss = proc_rss_bytes(self.pid)
        out["rss_bytes"] = rss.get("VmRSS")
        out["rss_hwm_bytes"] = rss.get("VmHWM")
        out["rss_max_sampled_bytes"] = self.rss_max or None
        out["smaps_rollup"] = {k: v for k, v in proc_smaps_rollup(self.pid).items()
                               if k in ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem",
                                        "Anonymous", "Swap")}
        return out


# --- the run ----------------------------------------------------------------------------------

class SideBySide:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log: IO[Any] = (self.out / "side_by_side-logs.txt").open("a")
        self.ours = Target("gpu-goodput-exporter")
        self.nvitop = Target("nvitop-exporter")
        self.daemon: DaemonProcess | None = None
        self.nvitop_proc: subprocess.Popen[bytes] | None = None
        self.load: subprocess.Popen[bytes] | None = None
        self.result: dict[str, Any] = {"schema": 1, "started": _now(), "args": vars(args),
                                       "simulate": args.simulate, "phases": []}

    def save(self) -> None:
        tmp = self.out / "side_by_side.json.tmp"
        tmp.write_text(json.dumps(self.result, indent=1, default=str))
        tmp.replace(self.out / "side_by_side.json")
        (self.out / "side_by_side.md").write_text(markdown(self.result))

    def say(self, msg: str) -> None:
        print(f"[side_by_side] {msg}", flush=True)

    def start(self) -> None:
        args = self.args
        extra = ["--simulate"] if args.simulate else []
        self.daemon = DaemonProcess("--interval", str(args.interval), *extra, log=self.log,
                                    python=args.python)
        try:
            self.daemon.start(timeout=60, ready_path="/readyz")
            self.ours.pid, self.ours.port = self.daemon.pid, self.daemon.port
            self.ours.command = self.daemon.command()
        except DaemonStartError as exc:
            self.ours.error = str(exc)
        self.say(f"{self.ours.name}: {self.ours.error or f'ready (pid {self.ours.pid})'}")
        port = free_port()
        cmd = [*shlex.split(args.nvitop_cmd), "--bind-address", "127.0.0.1", "--port",
               str(port), "--interval", str(args.interval)]
        self.nvitop.command = cmd
        self.log.write(f"# --- {shlex.join(cmd)}\n")
        self.log.flush()
        try:
            self.nvitop_proc = subprocess.Popen(cmd, cwd=REPO, stdout=self.log,
                                                stderr=subprocess.STDOUT, env=child_env())
            deadline = time.monotonic() + 60
            while True:
                if self.nvitop_proc.poll() is not None:
                    raise RuntimeError(f"exited with {self.nvitop_proc.returncode} at start")
                try:
                    wait_http(f"http://127.0.0.1:{port}/metrics", timeout=1.0)
                    break
                except TimeoutError:
                    if time.monotonic() > deadline:
                        raise
            self.nvitop.pid, self.nvitop.port = self.nvitop_proc.pid, port
        except (OSError, RuntimeError, TimeoutError) as exc:
            self.nvitop.error = f"{type(exc).__name__}: {exc}"
            if self.nvitop_proc is not None:
                stop_process(self.nvitop_proc)
        self.say(f"{self.nvitop.name}: {self.nvitop.error or f'ready (pid {self.nvitop.pid})'}")
        if args.load != "none" and not args.simulate:
            lcmd = command(args.load, "--seconds", str(args.load_seconds),
                           *shlex.split(args.load_args))
            self.log.write(f"# --- load: {shlex.join(lcmd)}\n")
            self.log.flush()
            self.load = subprocess.Popen(lcmd, cwd=REPO, stdout=self.log,
                                         stderr=subprocess.STDOUT, env=child_env(NO_MULTICAST))
        self.result["exporters"] = {
            t.name: {"command": t.command, "error": t.error, "pid": t.pid}
            for t in (self.ours, self.nvitop)}
        self.result["versions"] = _versions()
        rc, listing = run_cmd(["nvidia-smi", "-L"])
        self.result["gpus"] = (sum(1 for ln in listing.splitlines() if ln.startswith("GPU "))
                               if rc == 0 else None)
        self.save()

    def run(self) -> None:
        self.start()
        time.sleep(self.args.warmup)
        targets = [t for t in (self.ours, self.nvitop) if t.pid is not None]
        for period, seconds in parse_phases(self.args.phases):
            self.say(f"phase: scrape every {period:g} s for {seconds:g} s")
            for t in targets:
                t.begin_phase()
            t0 = time.monotonic()
            n = 0
            while time.monotonic() - t0 < seconds:
                order = targets if n % 2 == 0 else list(reversed(targets))
                for t in order:
                    t.scrape_once()
                n += 1
                time.sleep(max(0.0, t0 + n * period - time.monotonic()))
            rows = {t.name: t.end_phase() for t in (self.ours, self.nvitop)}
            self.result["phases"].append({"scrape_period_seconds": period, "seconds": seconds,
                                          "exporters": rows})
            for name, row in rows.items():
                self.say(f"  {name}: {row}")
            self.save()
        self.result["complete"] = True

    def close(self) -> None:
        if self.load is not None:
            stop_process(self.load)
        if self.nvitop_proc is not None:
            self.result.setdefault("exit_codes", {})[self.nvitop.name] = stop_process(
                self.nvitop_proc)[0]
        if self.daemon is not None:
            self.result.setdefault("exit_codes", {})[self.ours.name] = self.daemon.stop()[0]
        self.result["finished"] = _now()
        self.save()
        self.log.close()


def markdown(result: Mapping[str, Any]) -> str:
    def mib(value: Any) -> str:
        return "-" if not value else f"{value / 2**20:.1f}"

    def kb(value: Any) -> str:
        return "-" if not value else f"{value / 1000:.1f}"

    lines = ["# Side by side: gpu-goodput-exporter and nvitop-exporter", "",
             f"Started {result.get('started')}; {result.get('gpus')} GPU(s); versions "
             f"{result.get('versions')}"
             + (" — SIMULATED (pipeline check only)" if result.get("simulate") else ""), ""]
    for name, ex in (result.get("exporters") or {}).items():
        lines.append(f"- {name}: `{shlex.join(ex.get('command') or [])}`"
                     + (f" — ERROR {ex['error']}" if ex.get("error") else ""))
    lines += ["", "| scrape every | exporter | scrapes | CPU % of a core | RSS MiB (max) "
              "| PSS anon/file MiB | p50 / p99 / max ms | body KB (gzip) | series |",
              "|---|---|---|---|---|---|---|---|---|"]
    for phase in result.get("phases") or []:
        for name, r in phase["exporters"].items():
            if "error" in r:
                lines.append(f"| {phase['scrape_period_seconds']:g} s | {name} | error: "
                             f"{r['error']} | | | | | | |")
                continue
            sm = r.get("smaps_rollup") or {}
            lines.append(
                f"| {phase['scrape_period_seconds']:g} s ({phase['seconds']:g} s) | {name} "
                f"| {r.get('scrapes')} | {r.get('cpu_percent_of_core', '-')} "
                f"| {mib(r.get('rss_bytes'))} ({mib(r.get('rss_max_sampled_bytes'))}) "
                f"| {mib(sm.get('Pss_Anon'))}/{mib(sm.get('Pss_File'))} "
                f"| {r.get('latency_ms_p50', '-')} / {r.get('latency_ms_p99', '-')} / "
                f"{r.get('latency_ms_max', '-')} | {kb(r.get('body_bytes'))} "
                f"({kb(r.get('gzip_body_bytes'))}{'' if r.get('gzip_honoured') else ' if gzipped'})"
                f" | {r.get('series', '-')} |")
    return "\n".join(lines) + "\n"


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("nvitop", "nvitop-exporter", "nvidia-ml-py", "prometheus-client"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    try:
        from exporter import __version__

        out["gpu-goodput-exporter"] = __version__
    except Exception:
        out["gpu-goodput-exporter"] = None
    return out


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "side-by-side-out"))
    p.add_argument("--interval", type=float, default=1.0, help="poll interval of both exporters")
    p.add_argument("--phases", default="1:90,15:90",
                   help="PERIOD:SECONDS,... scrape period and length of each phase")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds before the first phase")
    p.add_argument("--python", default=shlex.quote(sys.executable),
                   help='interpreter command for this exporter, e.g. "python3 -S" to leave out '
                   "site-packages the image would not have (give nvitop the same)")
    p.add_argument("--nvitop-cmd", default=f"{shlex.quote(sys.executable)} -m nvitop_exporter",
                   help="how to start nvitop-exporter (its flags are appended)")
    p.add_argument("--load", default="none",
                   help="a workload (python -m bench.gpu.workloads NAME) on the GPU meanwhile "
                        "(e.g. gemm)")
    p.add_argument("--load-args", default="--gemm-n 4096",
                   help="its extra arguments")
    p.add_argument("--load-seconds", type=float, default=600.0)
    p.add_argument("--simulate", action="store_true",
                   help="this exporter on its simulated node (pipeline check)")
    args = p.parse_args(argv)
    run = SideBySide(args)

    def _terminate(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        run.run()
    except KeyboardInterrupt:
        run.say("interrupted")
    finally:
        run.close()
    print(markdown(run.result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
