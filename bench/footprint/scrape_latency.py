"""/metrics latency under concurrent scrapers, and daemon RSS over time, on the simulated node.

    python3 -m bench.footprint.scrape_latency [--minutes 10] [--out results.md] \
        [--json results.json]

Starts the daemon (``python -m exporter --simulate``, 8 simulated GPUs, 1 s interval) on
loopback, then for each concurrency level (default 1, 10, 50) runs that many scrapers in a loop
over keep-alive connections, with the headers Prometheus sends, and times each request from
send to last body byte. Each level is bounded by a request count and a time cap. Afterwards one
scraper keeps scraping every ``--scrape-interval`` seconds (a Prometheus) for ``--minutes`` and
the daemon's RSS is read from /proc every minute. Writes a markdown table (stdout or ``--out``).
No timing is asserted anywhere: these are measurements, not tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from testkit.harness import free_port
from testkit.harness import proc_rss_bytes as rss_bytes

ROOT = Path(__file__).resolve().parents[2]


# What Prometheus 2.x/3.x sends when scraping.
PROM_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0;q=0.5,"
              "text/plain;version=0.0.4;q=0.4,*/*;q=0.1",
    "Accept-Encoding": "gzip",
    "User-Agent": "goodput-bench-scraper",
}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100.0 * len(ordered) + 0.5)))
    return ordered[rank - 1]


async def one_level(url: str, concurrency: int, requests: int, max_seconds: float,
                    min_seconds: float = 0.0, pause: float = 0.0) -> dict[str, Any]:
    """``concurrency`` scrapers share ``requests`` requests, run at least ``min_seconds`` and
    stop at ``max_seconds``; each waits ``pause`` seconds between its requests."""
    latencies: list[float] = []
    errors: list[str] = []
    sizes: list[int] = []
    content_type = ""
    remaining = requests
    start = time.perf_counter()
    deadline = start + max_seconds
    floor = start + min_seconds
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=10)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     headers=PROM_HEADERS, auto_decompress=True) as session:
        async def scraper() -> None:
            nonlocal remaining, content_type
            while (remaining > 0 or time.perf_counter() < floor) and (
                    time.perf_counter() < deadline):
                remaining -= 1
                if pause:
                    await asyncio.sleep(pause)
                t0 = time.perf_counter()
                try:
                    async with session.get(url) as resp:
                        body = await resp.read()
                        if resp.status != 200:
                            errors.append(f"HTTP {resp.status}")
                            continue
                        content_type = resp.headers.get("Content-Type", "")
                except (aiohttp.ClientError, TimeoutError) as exc:
                    errors.append(type(exc).__name__)
                    continue
                latencies.append(time.perf_counter() - t0)
                sizes.append(len(body))

        started = time.perf_counter()
        await asyncio.gather(*(scraper() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    result: dict[str, Any] = {"concurrency": concurrency, "requests": len(latencies),
                              "errors": len(errors), "error_kinds": sorted(set(errors)),
                              "seconds": wall, "content_type": content_type}
    if latencies:
        ms = [x * 1000.0 for x in latencies]
        result.update(p50_ms=percentile(ms, 50), p90_ms=percentile(ms, 90),
                      p99_ms=percentile(ms, 99), max_ms=max(ms), mean_ms=statistics.fmean(ms),
                      requests_per_second=len(ms) / wall, body_bytes=statistics.median(sizes))
    return result


async def keep_scraping(url: str, pid: int, minutes: float, interval: float
                        ) -> list[dict[str, Any]]:
    """One Prometheus-like scraper for ``minutes``; RSS read every minute."""
    points: list[dict[str, Any]] = []
    started = time.monotonic()
    next_rss = 0.0
    async with aiohttp.ClientSession(headers=PROM_HEADERS) as session:
        while True:
            elapsed = time.monotonic() - started
            if elapsed >= next_rss:
                points.append({"minute": round(elapsed / 60.0, 2), **rss_bytes(pid)})
                next_rss += 60.0
            if elapsed >= minutes * 60.0:
                break
            try:
                async with session.get(url) as resp:
                    await resp.read()
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(max(0.0, min(interval, minutes * 60.0 - elapsed)))
    return points


def start_daemon(python: str, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    cmd = [python, "-m", "exporter", "--simulate", "--listen", f"127.0.0.1:{port}",
           "--interval", "1", "--log-format", "json"]
    log = log_path.open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    log.close()
    return proc


async def wait_ready(base: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {proc.returncode}")
            try:
                async with session.get(base + "/readyz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"daemon not ready after {timeout:.0f}s")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    port = args.port or free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = Path(tempfile.gettempdir()) / f"goodput-scrape-latency-{port}.log"
    proc = start_daemon(args.python, port, log_path)
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                    "machine": platform.machine()},
                           "daemon_log": str(log_path), "levels": [], "rss": []}
    try:
        await wait_ready(base, proc)
        await asyncio.sleep(args.settle)
        out["rss_ready"] = rss_bytes(proc.pid)
        await one_level(base + "/metrics", 1, 20, 10.0)  # warm the render cache and the client
        for level in args.levels:
            requests = max(args.requests, args.requests_per_scraper * level)
            result = await one_level(base + "/metrics", level, requests, args.max_seconds,
                                     min_seconds=args.min_seconds)
            out["levels"].append(result)
            print(f"concurrency {level}: {json.dumps(result)}", file=sys.stderr, flush=True)
        if args.cold:
            # One scraper, a poll interval apart: every request renders a fresh snapshot.
            out["cold"] = await one_level(base + "/metrics", 1, args.cold, 60.0, pause=1.05)
            print(f"cold: {json.dumps(out['cold'])}", file=sys.stderr, flush=True)
        out["rss_after_latency"] = rss_bytes(proc.pid)
        if args.minutes > 0:
            out["rss"] = await keep_scraping(base + "/metrics", proc.pid, args.minutes,
                                             args.scrape_interval)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    out["minutes"] = args.minutes
    return out


def markdown(result: dict[str, Any]) -> str:
    host = result.get("host", {})
    lines = [f"Simulated 8-GPU node, daemon at 1 s interval; {host.get('cpus')} CPUs "
             f"({host.get('machine')}), Python {host.get('python')}; scrapers and daemon share "
             "the machine.", "",
             "| concurrent scrapers | requests | p50 ms | p90 ms | p99 ms | max ms | req/s | "
             "errors | body bytes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result.get("levels", []):
        lines.append(
            f"| {r['concurrency']} | {r['requests']} | {r.get('p50_ms', 0):.2f} | "
            f"{r.get('p90_ms', 0):.2f} | {r.get('p99_ms', 0):.2f} | {r.get('max_ms', 0):.2f} | "
            f"{r.get('requests_per_second', 0):.0f} | {r['errors']} | "
            f"{r.get('body_bytes', 0):.0f} |")
    cold = result.get("cold")
    if cold and cold.get("requests"):
        lines.append(
            f"| 1, one request per poll (fresh render each) | {cold['requests']} | "
            f"{cold['p50_ms']:.2f} | {cold['p90_ms']:.2f} | {cold['p99_ms']:.2f} | "
            f"{cold['max_ms']:.2f} | — | {cold['errors']} | {cold['body_bytes']:.0f} |")
    content_type = next((r["content_type"] for r in result.get("levels", [])
                         if r.get("content_type")), "")
    if content_type:
        lines += ["", f"Served as `{content_type}`."]
    mib = 1024.0**2
    ready = result.get("rss_ready", {})
    lines += ["", "| moment | RSS MiB | peak RSS MiB |", "|---|---|---|"]
    if ready:
        lines.append(f"| ready | {ready['VmRSS'] / mib:.1f} | {ready['VmHWM'] / mib:.1f} |")
    after = result.get("rss_after_latency", {})
    if after:
        lines.append(f"| after the latency runs | {after['VmRSS'] / mib:.1f} | "
                     f"{after['VmHWM'] / mib:.1f} |")
    for point in result.get("rss", []):
        lines.append(f"| minute {point['minute']:.0f} | {point['VmRSS'] / mib:.1f} | "
                     f"{point['VmHWM'] / mib:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,10,50",
                        help="comma-separated numbers of concurrent scrapers")
    parser.add_argument("--requests", type=int, default=1000,
                        help="requests per level at least")
    parser.add_argument("--requests-per-scraper", type=int, default=40,
                        help="requests per level at least this times the concurrency")
    parser.add_argument("--min-seconds", type=float, default=6.0,
                        help="run each level at least this long, so it spans several polls "
                             "(renders of new snapshots, not only cached bodies)")
    parser.add_argument("--max-seconds", type=float, default=20.0, help="time cap per level")
    parser.add_argument("--cold", type=int, default=15,
                        help="requests of one scraper 1.05 s apart (each a fresh render); 0: off")
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="keep the daemon running (scraped) this long, then read RSS")
    parser.add_argument("--scrape-interval", type=float, default=15.0,
                        help="scrape interval while waiting for the RSS reading")
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--out", default="", help="markdown file (default stdout)")
    parser.add_argument("--json", default="", help="also write the raw results here")
    args = parser.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",") if x]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds: the daemon is stopped
    try:
        result = asyncio.run(run(args))
    except RuntimeError as exc:
        print(f"scrape_latency: {exc}", file=sys.stderr)
        return 1
    text = markdown(result)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
