"""[transfers] validation (issue 26): the daemon next to pinned, pageable, throttled, overlapped
and managed-memory bus traffic; per phase the counters and the verdict, to JSON + markdown.

One command on the GPU machine (no network needed)::

    PYTHONUNBUFFERED=1 python3 -m bench.gpu.transfers --out "$OUT" [--phase-seconds 7]

The phases run in one process (``python -m bench.gpu.workloads transfers``, from
``bench/gpu/workloads/transfer.py``); the daemon is scraped every second and each 1 s window is
given to the phase it lies in, counted from the phase's ``steady`` event (buffers allocated,
kernels compiled), leaving out the first ``--drop`` windows. Per phase the table gives the rate
the workload itself measured, NVML utilization (kernel time; copies count in it), GPM graphics
activity (copies do not), their difference (copy-engine time where no kernel runs), SM active,
PCIe rx/tx, the raw regime of most windows and the debounced regime at the phase's end. Writes
``transfers.json`` (rewritten as phases finish), ``transfers.md`` and ``transfers-logs.txt``.
``--simulate`` checks the pipeline without a GPU (numbers mean nothing). """

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from bench.gpu.analysis import parse_exposition
from bench.gpu.diagnosis import window_row
from bench.gpu.workloads.core import command
from bench.gpu.workloads.process import WorkloadProcess
from bench.gpu.workloads.transfer import BY_NAME
from testkit.harness import REPO, DaemonProcess, child_env, http_get

GRAPHICS = "goodput_gpu_graphics_active_ratio"


def _median(values: list[float]) -> float | None:
    vals = sorted(values)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def raw_regime(row: Mapping[str, Any]) -> str | None:
    """The window's undebounced regime: the one its regime_seconds counter grew for."""
    delta = row.get("regime_seconds_delta") or {}
    return max(delta, key=lambda r: delta[r]) if delta else None


def phase_summary(rows: list[dict[str, Any]], start: float, end: float, drop: int,
                  interval: float) -> dict[str, Any]:
    """Medians and verdicts of the windows lying wholly in [start + drop x interval, end]."""
    inside = [r for r in rows if r["wall"] - interval >= start + drop * interval - 0.05
              and r["wall"] <= end + 0.05]
    out: dict[str, Any] = {"windows": len(inside)}
    for col in ("util", "graphics", "sm_active", "dram", "pcie_rx_Bps", "pcie_tx_Bps",
                "nvlink_rx_Bps", "nvlink_tx_Bps", "power_w"):
        out[col] = _median([r[col] for r in inside if r.get(col) is not None])
    if out["util"] is not None and out["graphics"] is not None:
        out["copy_time"] = max(out["util"] - out["graphics"], 0.0)
    raw = Counter(r for r in (raw_regime(w) for w in inside) if r)
    out["raw_regimes"] = dict(raw.most_common())
    out["raw_regime"] = raw.most_common(1)[0][0] if raw else None
    out["regime"] = inside[-1].get("regime") if inside else None
    out["unproductive"] = sorted({u for r in inside for u in (r.get("unproductive") or [])})
    return out


def markdown(result: Mapping[str, Any]) -> str:
    def num(v: Any, scale: float = 1.0, digits: int = 2) -> str:
        return "-" if v is None else f"{v / scale:.{digits}f}"

    gpu = result.get("gpu") or {}
    lines = [
        "# Transfers run",
        "",
        f"GPU: {gpu.get('name', '?')}, driver {gpu.get('driver', '?')}; started "
        f"{result.get('started')}, {result.get('elapsed_seconds', 0):.0f} s; daemon "
        f"`{result.get('daemon_command')}`"
        + (" — SIMULATED (pipeline check only)" if result.get("simulate") else ""),
        "",
        "| phase | rate GB/s | util | graphics | copy time | SM | PCIe rx/tx GB/s | W "
        "| raw regime (windows) | regime | flags | expert |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, ph in (result.get("phases") or {}).items():
        s = ph.get("summary") or {}
        stats = ph.get("stats") or {}
        raws = ", ".join(f"{k} x{v}" for k, v in (s.get("raw_regimes") or {}).items())
        lines.append(
            f"| {name} | {num(stats.get('bytes_per_second'), 1e9)} | {num(s.get('util'))} "
            f"| {num(s.get('graphics'))} | {num(s.get('copy_time'))} | {num(s.get('sm_active'))} "
            f"| {num(s.get('pcie_rx_Bps'), 1e9, 2)}/{num(s.get('pcie_tx_Bps'), 1e9, 2)} "
            f"| {num(s.get('power_w'), 1, 0)} | {raws or '-'} | {s.get('regime') or '-'} "
            f"| {', '.join(s.get('unproductive') or []) or '-'} "
            f"| {ph.get('expert', '')}{' — ' + stats['error'] if stats.get('error') else ''} |")
    lines += ["", f"Medians over each phase's 1 s windows after the first "
              f"{result.get('args', {}).get('drop')}; rate: what the workload itself moved "
              "(managed rows: 2 x buffer per round, an upper bound); util: NVML utilization; "
              "graphics: GPM graphics activity; copy time = util - graphics; raw regime: "
              "the undebounced regime of each window (`goodput_gpu_regime_seconds_total`); "
              "regime: the published (debounced) `goodput_gpu_regime` at the phase's last "
              "window.", ""]
    for name, ph in (result.get("phases") or {}).items():
        if ph.get("note"):
            lines.append(f"- **{name}**: {ph['note']}")
    return "\n".join(lines) + "\n"


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log: IO[str] = (self.out / "transfers-logs.txt").open("a")
        self.t0 = time.monotonic()
        self.result: dict[str, Any] = {"schema": 1, "started": _now(), "simulate": args.simulate,
                                       "args": vars(args), "gpu": {}, "phases": {},
                                       "windows": []}
        self.work: WorkloadProcess | None = None

    def say(self, msg: str) -> None:
        line = f"[transfers {time.monotonic() - self.t0:6.1f}s] {msg}"
        print(line, flush=True)
        if not self.log.closed:
            self.log.write(line + "\n")
            self.log.flush()

    def save(self) -> None:
        self.result["elapsed_seconds"] = time.monotonic() - self.t0
        (self.out / "transfers.json").write_text(json.dumps(self.result, indent=1))
        (self.out / "transfers.md").write_text(markdown(self.result))

    def run(self) -> None:
        a = self.args
        if not a.simulate:
            code = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20)
            name, _, driver = code.stdout.strip().splitlines()[0].partition(", ")
            self.result["gpu"] = {"name": name, "driver": driver}
        daemon = DaemonProcess("--interval", str(a.interval), "--extended-metrics",
                               *(["--simulate"] if a.simulate else []), log=self.log)
        daemon.start(timeout=60, ready_path="/readyz")
        self.result["daemon_command"] = shlex.join(daemon.command())
        self.say(f"daemon ready at {daemon.url}")
        cmd = command("transfers", "--phase-seconds", str(a.phase_seconds), "--gap", str(a.gap),
                      "--phases", a.phases, *(["--dry-run"] if a.simulate else []))
        self.work = work = WorkloadProcess("transfers", cmd, REPO, child_env(), self.log,
                                           threading.Lock())
        prev: tuple[float, dict[str, float]] | None = None
        deadline = time.monotonic() + a.budget
        try:
            i = 0
            start = time.monotonic()
            while work.proc.poll() is None and time.monotonic() < deadline:
                i += 1
                time.sleep(max(0.0, start + i * a.interval - time.monotonic()))
                try:
                    status, body = http_get(daemon.url + "/metrics", timeout=5.0)
                except OSError as exc:
                    self.say(f"scrape failed: {exc}")
                    continue
                if status != 200:
                    continue
                device, _ = parse_exposition(body, "0")
                now = time.monotonic()
                row = window_row(device, prev[1] if prev else None,
                                 now - prev[0] if prev else None)
                row["graphics"] = device.get(GRAPHICS)
                row["wall"] = time.time()
                self.result["windows"].append(row)
                prev = (now, device)
                if i % 30 == 0:
                    self.collect()
                    self.save()
        finally:
            if work.proc.poll() is None:
                self.say("budget reached: stopping the workload")
            work.stop()
            daemon.stop()
            self.collect()
            self.result["complete"] = True
            self.save()

    def collect(self) -> None:
        """Pair each phase's start and end events and summarise its windows."""
        events = list(self.work.events) if self.work else []
        starts = {e["name"]: e["wall"] for e in events if e.get("event") == "phase"}
        starts.update({e["name"]: e["wall"] for e in events if e.get("event") == "steady"})
        for e in events:
            if e.get("event") != "phase_done" or e["name"] not in starts:
                continue
            spec = BY_NAME[e["name"]]
            self.result["phases"][e["name"]] = {
                "expert": spec.expert, "note": spec.note, "start": starts[e["name"]],
                "end": e["wall"], "stats": e.get("stats") or {},
                "summary": phase_summary(self.result["windows"], starts[e["name"]], e["wall"],
                                         self.args.drop, self.args.interval),
            }
        ready = next((e for e in events if e.get("event") == "ready"), None)
        if ready:
            self.result["workload_info"] = ready.get("info")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="transfers-out")
    p.add_argument("--phase-seconds", type=float, default=7.0)
    p.add_argument("--gap", type=float, default=1.0)
    p.add_argument("--drop", type=int, default=2, help="windows left out at each phase start")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--phases", default="", help="comma-separated subset (default: all)")
    p.add_argument("--budget", type=float, default=330.0, help="stop sampling after this long")
    p.add_argument("--simulate", action="store_true")
    args = p.parse_args(argv)
    run = Run(args)
    try:
        run.run()
    except KeyboardInterrupt:
        run.say("interrupted")
    for name, ph in run.result["phases"].items():
        s = ph["summary"]
        run.say(f"{name}: rate {ph['stats'].get('bytes_per_second', 0) / 1e9:.2f} GB/s util "
                f"{s['util']} graphics {s['graphics']} sm {s['sm_active']} pcie "
                f"{s['pcie_rx_Bps']}/{s['pcie_tx_Bps']} raw {s['raw_regime']} "
                f"regime {s['regime']}")
    run.log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
