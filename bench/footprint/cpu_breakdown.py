"""Where the daemon's CPU goes: the same run with one collector (or the profiling backend)
switched off at a time, scraped every second, CPU share of one core over a fixed window.
The difference between a variant and "all" is what that part costs.

    python3 -m bench.footprint.cpu_breakdown --seconds 45 --python "python3 -S" > cpu.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

from testkit.harness import DaemonProcess, proc_cpu_seconds

HERE = Path(__file__).resolve().parent

VARIANTS: dict[str, list[str]] = {
    "all": [],
    "no model": ["--no-collector.model"],
    "no xid": ["--no-collector.xid"],
    "profiling off": ["--profiling", "off"],
    "nvml only": ["--no-collector.model", "--no-collector.xid", "--profiling", "off"],
}


def measure(args: list[str], seconds: float, python: str, extra: list[str]) -> dict[str, float]:
    daemon = DaemonProcess("--interval", "1", *extra, *args, python=python)
    daemon.start()
    try:
        assert daemon.pid is not None
        time.sleep(3)
        start_cpu, start = proc_cpu_seconds(daemon.pid) or 0.0, time.monotonic()
        while time.monotonic() - start < seconds:
            with urllib.request.urlopen(daemon.url + "/metrics", timeout=5) as resp:
                resp.read()
            time.sleep(1)
        cpu = (proc_cpu_seconds(daemon.pid) or 0.0) - start_cpu
        wall = time.monotonic() - start
    finally:
        daemon.stop()
    return {"cpu_percent_of_core": round(100 * cpu / wall, 3), "seconds": round(wall, 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=45.0)
    p.add_argument("--python", default=sys.executable)
    args, extra = p.parse_known_args()
    out = {}
    for name, flags in VARIANTS.items():
        out[name] = measure(flags, args.seconds, args.python, extra)
        print(name, out[name], file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
