"""Where the exporter's memory goes: run the daemon in-process for a while, then write its
resident memory by mapping (anonymous heap, each shared library) and the top-level packages
it imported. Used to explain the RSS figure of bench/footprint/side_by_side.py.

    python3 -m bench.footprint.rss_breakdown --seconds 15 [exporter args...] > rss.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def mappings() -> dict[str, int]:
    """Rss kB by mapping name (``[heap]``, ``[anon]``, library path), from /proc/self/smaps."""
    out: Counter[str] = Counter()
    name = "[anon]"
    header = re.compile(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$")
    for line in Path("/proc/self/smaps").read_text().splitlines():
        m = header.match(line)
        if m:
            name = m.group(1).strip() or "[anon]"
            continue
        if line.startswith("Rss:"):
            out[name] += int(line.split()[1])
    return dict(out)


def report(seconds: float) -> None:
    time.sleep(seconds)
    maps = mappings()
    packages = Counter(m.split(".")[0] for m in list(sys.modules))
    by_dir: Counter[str] = Counter()
    for path, kb in maps.items():
        if "site-packages/" in path:
            by_dir[path.split("site-packages/")[1].split("/")[0]] += kb
        elif path.startswith("/"):
            by_dir[os.path.basename(path)] += kb
        else:
            by_dir[path] += kb
    rollup = {
        line.split(":")[0]: int(line.split()[1])
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]
    }
    print(json.dumps({
        "rollup_kb": rollup,
        "rss_kb_by_mapping": dict(by_dir.most_common(25)),
        "modules": len(sys.modules),
        "modules_by_package": dict(packages.most_common(30)),
    }, indent=1), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--module", default="",
                   help="run this module's __main__ instead (a peer, e.g. nvitop_exporter)")
    args, rest = p.parse_known_args()
    threading.Thread(target=report, args=(args.seconds,), daemon=True).start()
    if args.module:
        import runpy

        sys.argv = [args.module, *rest]
        runpy.run_module(args.module, run_name="__main__")
        return 0
    import socket

    from exporter.cli import main as exporter_main

    with socket.socket() as sock:  # a free port for the daemon's listener
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return exporter_main(["--listen", f"127.0.0.1:{port}", *rest])


if __name__ == "__main__":
    raise SystemExit(main())
