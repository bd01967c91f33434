"""Every workload for a few seconds through the entry point: did it say ``ready`` and ``done``,
and with which fields. A check that the module runs on a GPU machine, not a measurement.
As the orchestrators do, each runs ``--seconds`` past its ``ready`` (its own ``--seconds`` is
only a safety net, counted from its start) and is then stopped with SIGTERM::

    python3 -m bench.gpu.workloads.smoke --out "$OUT" [--seconds 3] [--names a,b] [--dry-run]

Writes ``workloads-smoke.json`` (rewritten after each workload) and ``workloads-smoke.md``.
Workloads that need what the machine lacks (two GPUs, a llama-server ``--url``) are still
started: their ``error`` line is the row.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.gpu.workloads.core import NO_MULTICAST, command
from bench.gpu.workloads.registry import REGISTRY
from bench.gpu.workloads.transfer import PHASES

REPO = Path(__file__).resolve().parents[3]
SETUP_SECONDS = 120.0  # torch start-up, allocation, warm-up (the decoder's is the longest)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def options(name: str, args: argparse.Namespace) -> list[str]:
    family = REGISTRY[name].family.name
    if family == "transfer":
        out = ["--phase-seconds", str(args.phase_seconds), "--gap", "0"]
    else:  # a safety net past setup; the smoke stops it --seconds after ready
        out = ["--seconds", str(args.seconds + SETUP_SECONDS)]
    if family == "panel":
        out += ["--port", str(_free_port())]
    if name == "serving" and args.url:
        out += ["--url", args.url, "--bursts", "2:1,2", "--gap", "1"]
    return out + (["--dry-run"] if args.dry_run else [])


def run_one(name: str, args: argparse.Namespace, log: Any) -> dict[str, Any]:
    cmd = command(name, *options(name, args))
    limit = (len(PHASES) * (args.phase_seconds + 3) + 60 if name == "transfers"
             else args.seconds + SETUP_SECONDS + 30)
    env = {**os.environ, **NO_MULTICAST, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH"))
                                         if p)}
    log.write(f"# --- {name}: {' '.join(cmd)}\n")
    log.flush()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log,
                            text=True)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if '"event": "ready"' in line or '"event": "error"' in line:
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if name != "transfers" and ready.wait(limit) and proc.poll() is None:
        time.sleep(args.seconds)  # the steady loop runs this long, then SIGTERM as in a run
        proc.send_signal(signal.SIGTERM)
    try:
        rc: int | None = proc.wait(timeout=max(1.0, limit - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        rc = None
    reader.join(timeout=10)
    out = "".join(lines)
    row: dict[str, Any] = {"family": REGISTRY[name].family.name, "command": cmd, "exit": rc,
                           "seconds": round(time.monotonic() - t0, 1), "events": {}}
    phases: dict[str, Any] = {}
    for line in out.splitlines():
        log.write(f"[{name}] {line}\n")
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        event = rec.get("event")
        row["events"][event] = row["events"].get(event, 0) + 1
        if event in ("ready", "done", "error") and event not in row:
            row[event] = {k: v for k, v in rec.items() if k not in ("event", "time")}
        if event == "phase_done":
            phases[rec["name"]] = rec.get("stats", {})
    if phases:
        row["phases"] = phases
        row["phase_errors"] = {n: s["error"] for n, s in phases.items() if "error" in s}
    row["status"] = ("ok" if rc == 0 and "ready" in row and "done" in row
                     and not row.get("phase_errors") else "error" if rc is not None else "timeout")
    return row


def _short(value: Any, width: int = 260) -> str:
    text = json.dumps(value, sort_keys=False)
    return text if len(text) <= width else text[: width - 3] + "..."


def markdown(result: dict[str, Any]) -> str:
    lines = ["| workload | family | status | s | ready info | done |", "|---|---|---|---|---|---|"]
    for name, row in result["workloads"].items():
        ready = dict((row.get("ready") or {}).get("info", {}))
        if isinstance(ready.get("phases"), list):
            ready["phases"] = len(ready["phases"])
        done = row.get("done") or row.get("error") or {}
        if "phases" in row:
            done = {**done, "phases_ok": len(row["phases"]) - len(row["phase_errors"]),
                    "phase_errors": row["phase_errors"]}
        cells = [f"`{name}`", row["family"], row["status"], str(row["seconds"]),
                 _short(ready).replace("|", "/"), _short(done).replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    phases = next((r["phases"] for r in result["workloads"].values() if "phases" in r), None)
    if phases:
        lines += ["", "| phase | bytes/s | stats |", "|---|---|---|"]
        for name, stats in phases.items():
            rate = stats.get("bytes_per_second")
            lines.append(f"| `{name}` | {rate:.3g} | {_short(stats, 160)} |" if rate is not None
                         else f"| `{name}` | - | {_short(stats, 160)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=3.0, help="per workload")
    ap.add_argument("--phase-seconds", type=float, default=1.0, help="per transfers phase")
    ap.add_argument("--names", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--url", default="", help="llama-server for the serving row")
    ap.add_argument("--dry-run", action="store_true", help="each workload's --dry-run")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.names.split(",") if n] or list(REGISTRY)
    result: dict[str, Any] = {"started": time.time(), "python": sys.version.split()[0],
                              "args": vars(args), "workloads": {}}
    with (out / "workloads-smoke-logs.txt").open("a") as log:
        for name in names:
            row = run_one(name, args, log)
            result["workloads"][name] = row
            print(f"{name}: {row['status']} ({row['seconds']} s, exit {row['exit']})", flush=True)
            (out / "workloads-smoke.json").write_text(json.dumps(result, indent=1))
    (out / "workloads-smoke.md").write_text(markdown(result))
    return 0 if all(r["status"] == "ok" for r in result["workloads"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
