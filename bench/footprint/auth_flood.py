"""How long a login flood delays the first valid scrape (basic auth, bcrypt cost 10).

    python3 -m bench.footprint.auth_flood [--clients 200] [--repeat 3] [--out results.md]

For each scenario a fresh daemon (``python -m exporter --simulate``) starts on loopback with a
web-config file holding one bcrypt user, so the valid scrape is the first one (nothing cached).
A separate flood process runs ``--clients`` loops sending wrong passwords, from 127.0.0.2 (a
different client than the scraper) or from 127.0.0.1 (the scraper's own address); after one
second of flood, the scraper (127.0.0.1, a new connection) times one valid GET /metrics from
send to last byte, then a second one (the verified password is then remembered). The delay is
the first valid scrape's time under flood minus its time without a flood. No timing is
asserted anywhere: these are measurements, not tests.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt

from testkit.harness import free_port

ROOT = Path(__file__).resolve().parents[2]


USER = "prometheus"
PASSWORD = "right-password"
COST = 10
SCENARIOS: dict[str, tuple[str, str]] = {
    # name: (flood source address, password kind)
    "none": ("", ""),
    "other client, distinct passwords": ("127.0.0.2", "distinct"),
    "other client, one password": ("127.0.0.2", "same"),
    "same address, one password": ("127.0.0.1", "same"),
    "same address, distinct passwords": ("127.0.0.1", "distinct"),
}


def basic(password: str) -> dict[str, str]:
    token = base64.b64encode(f"{USER}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def flood(url: str, source: str, kind: str, clients: int, seconds: float) -> dict[str, Any]:
    """``clients`` loops of wrong-password requests for ``seconds``; answers by status."""
    statuses: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=0, local_addr=(source, 0))
    timeout = aiohttp.ClientTimeout(total=30)

    async def one(http: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            password = secrets.token_hex(8) if kind == "distinct" else "wrong"
            try:
                async with http.get(url, headers=basic(password)) as response:
                    await response.read()
                    statuses[str(response.status)] += 1
            except (TimeoutError, aiohttp.ClientError) as exc:
                statuses[type(exc).__name__] += 1

    start = time.monotonic()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        await asyncio.gather(*(one(http) for _ in range(clients)))
    elapsed = time.monotonic() - start  # in-flight requests are answered after the deadline
    return {"statuses": dict(statuses), "per_second": sum(statuses.values()) / elapsed}


async def timed_scrape(url: str) -> tuple[float, int]:
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.1", 0), force_close=True)
    async with aiohttp.ClientSession(connector=connector) as http:
        start = time.perf_counter()
        async with http.get(url, headers=basic(PASSWORD)) as response:
            await response.read()
            return time.perf_counter() - start, response.status


def start_daemon(web_config: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "exporter", "--simulate", "--simulate-gpus", "2",
         "--listen", f"127.0.0.1:{port}", "--web-config-file", str(web_config),
         "--log-level", "warning"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


async def wait_healthy(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url + "/healthz") as response:
                    if response.status == 200:
                        return
            if time.monotonic() > deadline:
                raise TimeoutError("daemon did not start")
            await asyncio.sleep(0.1)


async def scenario(name: str, web_config: Path, clients: int) -> dict[str, Any]:
    source, kind = SCENARIOS[name]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    daemon = start_daemon(web_config, port)
    flooder = None
    try:
        await wait_healthy(base)
        if source:
            flooder = subprocess.Popen(
                [sys.executable, __file__, "--flood-worker", f"{base}/metrics", source, kind,
                 str(clients)],
                stdout=subprocess.PIPE,
            )
        await asyncio.sleep(1.0)  # with or without a flood, the same time since start
        first, first_status = await timed_scrape(f"{base}/metrics")
        second, second_status = await timed_scrape(f"{base}/metrics")
        flood_result: dict[str, Any] = {}
        if flooder is not None:
            out, _ = flooder.communicate(timeout=60)
            flood_result = json.loads(out)
        return {
            "scenario": name, "first_s": first, "first_status": first_status,
            "second_s": second, "second_status": second_status, **flood_result,
        }
    finally:
        if flooder is not None and flooder.poll() is None:
            flooder.kill()
        daemon.terminate()
        daemon.wait(timeout=15)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=COST)).decode()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        web_config = Path(tmp) / "web.yml"
        web_config.write_text(json.dumps({"basic_auth_users": {USER: hashed}}))
        for name in SCENARIOS:
            for _ in range(args.repeat):
                results.append(await scenario(name, web_config, args.clients))
                print(json.dumps(results[-1]), file=sys.stderr)
    return results


def table(results: list[dict[str, Any]], clients: int) -> str:
    base = statistics.median(r["first_s"] for r in results if r["scenario"] == "none")
    lines = [
        f"{clients} flood clients, bcrypt cost {COST}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        "",
        "| flood | runs | first valid scrape, median s (max) | delay vs no flood, s "
        "| status | second scrape s | flood answers/s | flood answers |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in SCENARIOS:
        rows = [r for r in results if r["scenario"] == name]
        firsts = [r["first_s"] for r in rows]
        statuses = sorted({str(r["first_status"]) for r in rows})
        answers: Counter[str] = Counter()
        for r in rows:
            answers.update(r.get("statuses", {}))
        rate = statistics.median(r.get("per_second", 0.0) for r in rows)
        lines.append(
            f"| {name} | {len(rows)} | {statistics.median(firsts):.3f} ({max(firsts):.3f}) "
            f"| {statistics.median(firsts) - base:+.3f} | {'/'.join(statuses)} "
            f"| {statistics.median(r['second_s'] for r in rows):.3f} | {rate:.0f} "
            f"| {dict(answers) or '-'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--flood-worker":
        url, source, kind, clients = sys.argv[2:6]
        print(json.dumps(asyncio.run(flood(url, source, kind, int(clients), 3.0))))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    text = table(asyncio.run(main_async(args)), args.clients)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
