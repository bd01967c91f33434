"""[footprint] Where a scrape's time goes: this exporter under interpreter variants, next to
a bare aiohttp server answering the same bytes, on fresh and on kept-alive connections.

    PYTHONUNBUFFERED=1 python3 -m bench.footprint.scrape_floor --out "$OUT" --seconds 60 \
        --every 0.25

Prometheus sends its OpenMetrics ``Accept`` header with ``Accept-Encoding: gzip`` and keeps
its connection to a target open between scrapes; both are what is measured here, each
scrape alternating a fresh connection and the kept one. The floor (``bare_aiohttp``) is an
aiohttp app with no middleware returning the exporter's last gzip body: the distance to it is
what the exporter's own handler and its background work cost. Variants (``--variants``) run
the daemon through ``bench/footprint/interp_variant.py``: ``shipped`` as is, ``switch`` with a
0.5 ms GIL switch interval, ``freeze`` with ``gc.freeze()`` after start-up, ``both``.
``--simulate`` uses the simulated node (no GPU needed).
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.footprint.side_by_side import percentile
from testkit.harness import DaemonProcess, free_port, stop_process, wait_http

HERE = Path(__file__).resolve().parent


PROMETHEUS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
VARIANTS: dict[str, dict[str, str]] = {
    "shipped": {},
    "switch": {"BENCH_SWITCH_INTERVAL": "0.0005"},
    "freeze": {"BENCH_GC_FREEZE_AFTER": "8"},
    "both": {"BENCH_SWITCH_INTERVAL": "0.0005", "BENCH_GC_FREEZE_AFTER": "8"},
}
FLOOR = textwrap.dedent("""
    import sys
    from aiohttp import web
    body = open(sys.argv[2], "rb").read()
    ctype = sys.argv[3]
    async def metrics(request):
        return web.Response(body=body, headers={"Content-Type": ctype, "Content-Encoding": "gzip"})
    app = web.Application()
    app.router.add_get("/metrics", metrics)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
""")


class Scraper:
    """GET /metrics with Prometheus's headers, on a fresh connection or on a kept one."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.kept: http.client.HTTPConnection | None = None

    def once(self, keep: bool) -> tuple[float, bytes, str]:
        t0 = time.perf_counter()
        conn = self.kept if keep and self.kept else http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=10)
        conn.request("GET", "/metrics", headers=PROMETHEUS)
        resp = conn.getresponse()
        body = resp.read()
        elapsed = time.perf_counter() - t0
        if keep:
            self.kept = conn
        else:
            conn.close()
        return elapsed, body, resp.getheader("Content-Type") or ""

    def close(self) -> None:
        if self.kept:
            self.kept.close()


def measure(port: int, seconds: float, every: float) -> dict[str, Any]:
    scraper = Scraper(port)
    times: dict[str, list[float]] = {"fresh": [], "kept": []}
    body, ctype = b"", ""
    end = time.monotonic() + seconds
    keep = False
    try:
        while time.monotonic() < end:
            elapsed, body, ctype = scraper.once(keep)
            times["kept" if keep else "fresh"].append(elapsed * 1000)
            keep = not keep
            time.sleep(every)
    finally:
        scraper.close()
    out: dict[str, Any] = {"gzip_bytes": len(body), "content_type": ctype}
    for mode, xs in times.items():
        out[mode] = {"n": len(xs), **{f"p{q}": percentile(xs, q) for q in (50, 90, 99)},
                     "max": max(xs) if xs else None}
    out["_body"], out["_ctype"] = body, ctype
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--every", type=float, default=0.25)
    p.add_argument("--variants", default="shipped,switch,freeze,both")
    p.add_argument("--simulate", action="store_true")
    p.add_argument("--warmup", type=float, default=10.0)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    body, ctype = b"", ""
    for name in args.variants.split(","):
        daemon = DaemonProcess(*(["--simulate"] if args.simulate else []),
                               python=f"{sys.executable} {HERE / 'interp_variant.py'}",
                               env=VARIANTS[name])
        daemon.start()
        try:
            time.sleep(args.warmup)
            results[name] = measure(daemon.port, args.seconds, args.every)
        finally:
            daemon.stop()
        body, ctype = results[name].pop("_body"), results[name].pop("_ctype")
        print(name, json.dumps(results[name]), flush=True)
    body_file = args.out / "floor-body.gz"
    body_file.write_bytes(body)
    port = free_port()
    floor = subprocess.Popen([sys.executable, "-c", FLOOR, str(port), str(body_file), ctype])
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", timeout=20)
        results["bare_aiohttp"] = measure(port, args.seconds, args.every)
    finally:
        stop_process(floor)
        body_file.unlink()
    results["bare_aiohttp"].pop("_body"), results["bare_aiohttp"].pop("_ctype")
    print("bare_aiohttp", json.dumps(results["bare_aiohttp"]), flush=True)
    (args.out / "scrape_floor.json").write_text(json.dumps(
        {"every_s": args.every, "seconds": args.seconds, "simulate": args.simulate,
         "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
