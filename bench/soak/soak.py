"""Soak: the daemon on the simulated node for N minutes with faults cycling, sampling its
resident memory, open file descriptors and threads every minute ([hardening]).

Faults, each switched every 20 s in turn: a serving target that answers normally, hangs past
the timeout, trickles one byte a second, returns garbage, a 5 MB body, HTTP 500, resets the
connection, or sends NaN/+Inf values; a kubelet socket path that does not exist (the
attribution source fails every poll); scrapes of /metrics every second from one client and
bursts of 20 concurrent ones. The figures go to stdout as JSON lines and a markdown table.

    python3 -m bench.soak.soak --minutes 30 > soak.md
    python3 -m bench.soak.soak --minutes 15 --trace growth.jsonl   # where Python memory grew
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import sys
import time
from pathlib import Path

from aiohttp import web

from testkit.harness import DaemonProcess, free_port

HERE = Path(__file__).resolve().parent

GOOD = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m"} %d
"""
BAD_VALUES = """vllm:num_requests_running{model_name="m"} +Inf
vllm:generation_tokens_total{model_name="m"} NaN
"""
MODES = ("ok", "hang", "trickle", "garbage", "huge", "error", "reset", "non_finite")


class FaultyEngine:
    def __init__(self) -> None:
        self.mode = "ok"
        self.tokens = 0

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        self.tokens += 100
        mode = self.mode
        if mode == "hang":
            await asyncio.sleep(30)
        if mode == "trickle":
            resp = web.StreamResponse()
            await resp.prepare(request)
            with contextlib.suppress(ConnectionError):  # the exporter gives up first
                for ch in (GOOD % self.tokens).encode()[:40]:
                    await resp.write(bytes([ch]))
                    await asyncio.sleep(1)
            return resp
        if mode == "garbage":
            return web.Response(body=b"\x00\xff not prometheus {{{")
        if mode == "huge":
            return web.Response(text="# " + "x" * 5_000_000)
        if mode == "error":
            return web.Response(status=500, text="boom")
        if mode == "reset":
            if request.transport is not None:
                request.transport.abort()  # RST, no answer
            raise asyncio.CancelledError
        if mode == "non_finite":
            return web.Response(text=BAD_VALUES)
        return web.Response(text=GOOD % self.tokens)


def proc_sample(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    field = {line.split(":")[0]: line.split(":")[1].strip() for line in status.splitlines()}
    return {
        "rss_kb": int(field["VmRSS"].split()[0]),
        "threads": int(field["Threads"]),
        "fds": len(list(Path(f"/proc/{pid}/fd").iterdir())),
    }


async def run(minutes: float, trace: str = "") -> list[dict[str, object]]:
    engine = FaultyEngine()
    app = web.Application()
    app.router.add_get("/metrics", engine.metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    daemon = DaemonProcess(
        "--simulate", "--serving-target", f"http://127.0.0.1:{port}/metrics",
        "--kubernetes", "--kubelet-socket", "/nonexistent/kubelet.sock",
        log=Path("/tmp/soak-daemon.log"),
        python=f"{sys.executable} {HERE / 'traced_daemon.py'} {trace}" if trace else sys.executable,
    )
    await asyncio.to_thread(daemon.start)
    assert daemon.pid is not None
    samples: list[dict[str, object]] = []
    start = time.monotonic()
    modes = itertools.cycle(MODES)
    next_switch = next_sample = start
    import aiohttp

    async with aiohttp.ClientSession() as http:
        scrapes = failures = 0
        while (now := time.monotonic()) - start < minutes * 60:
            if now >= next_switch:
                engine.mode = next(modes)
                next_switch += 20
            if now >= next_sample:
                sample = {"minute": round((now - start) / 60, 1), "fault": engine.mode,
                          "scrapes": scrapes, "scrape_failures": failures,
                          **proc_sample(daemon.pid)}
                samples.append(sample)
                print(json.dumps(sample), file=sys.stderr, flush=True)
                next_sample += 60
            burst = 20 if int(now - start) % 30 == 0 else 1
            results = await asyncio.gather(
                *(http.get(daemon.url + "/metrics") for _ in range(burst)),
                return_exceptions=True)
            for r in results:
                scrapes += 1
                if isinstance(r, BaseException) or r.status != 200:
                    failures += 1
                else:
                    await r.read()
                    r.release()
            await asyncio.sleep(1)
    daemon.stop()
    await runner.cleanup()
    return samples


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--trace", metavar="OUT.jsonl", default="",
                   help="run the daemon under tracemalloc (bench/soak/traced_daemon.py), "
                   "growth to OUT")
    args = p.parse_args()
    samples = asyncio.run(run(args.minutes, args.trace))
    print("| minute | fault now | RSS MiB | threads | open fds | scrapes | failed |")
    print("|---|---|---|---|---|---|---|")
    for s in samples:
        rss_mib = float(str(s["rss_kb"])) / 1024
        print(f"| {s['minute']} | {s['fault']} | {rss_mib:.1f} | {s['threads']} "
              f"| {s['fds']} | {s['scrapes']} | {s['scrape_failures']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
