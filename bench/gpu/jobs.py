"""[jobs] validation: multi-GPU jobs on real GPUs, each row's truth (measured by the ranks
with CUDA events, bench/gpu/workloads/jobs.py) beside the exporter's verdict, straggler
name and waited share, for each way a job can be identified.

One command on a machine with 2+ GPUs (no network needed)::

    PYTHONUNBUFFERED=1 python3 -m bench.gpu.jobs --out "$OUT" --seconds 45

Identity modes, each a daemon of its own scraping the same GPUs at once (``--modes``):
``pods`` (--kubernetes against the kubelet stand-in, bench/gpu/pod_standin.py: one pod holds
every GPU), ``slurm`` (the job collector reads SLURM_JOB_ID, set on the workload's processes)
and ``process`` (the job collector told to trust nothing but the process tree). Every row
runs once; all daemons judge it side by side. Writes ``jobs.json`` (every window of every
daemon, and the truths), ``jobs.md`` (the report) and ``jobs-logs.txt``. ``--simulate``
runs the pipeline without a GPU (dry-run workloads on the simulated node; numbers mean
nothing).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.gpu.workloads.core import NO_MULTICAST, command
from bench.gpu.workloads.process import WorkloadProcess
from testkit.harness import REPO, DaemonProcess, child_env, free_port, http_get

# row -> (workload, its options); how the row starts and what it expects: LAUNCH
ROWS: dict[str, tuple[str, list[str]]] = {
    "rotating": ("job_rotating", ["--extra", "1.0"]),
    "pipeline_gpipe": ("job_gpipe", ["--microbatches", "4", "--activation-mib", "32"]),
    "straggler_10pct": ("job_straggler", ["--extra", "0.10"]),
    "host_stall": ("job_host_stall", ["--stall-ms", "300"]),
    "late_joiner": ("job_late", ["--late-s", "8"]),
    "balanced": ("job_balanced", []),
    "comm_heavy": ("job_tp", ["--gemm-n", "4096", "--gemms", "1", "--allreduce-mib", "8",
                              "--rounds", "4"]),
    "back_to_back": ("job_rotating", ["--extra", "1.0"]),
    "straggler_5x": ("job_straggler", ["--extra", "4"]),
    "straggler_25pct": ("job_straggler", ["--extra", "0.25"]),
    "ddp_overlap": ("job_ddp", []),
    "p2p_copy": ("job_p2p", []),
    "pipeline_2stage": ("job_pipeline", ["--extra", "0.25"]),
}
LOST_ROWS = ("rotating", "pipeline_gpipe", "straggler_10pct", "host_stall", "late_joiner",
             "balanced", "comm_heavy", "back_to_back")
"""The [lost] report's rows (issue 42), the default."""
TORCHRUN = {"rotating": "rdzv", "pipeline_gpipe": "plain", "straggler_10pct": "rdzv",
            "host_stall": "plain", "late_joiner": "rdzv", "balanced": "plain",
            "comm_heavy": "rdzv", "back_to_back": "plain"}
"""Rows whose ranks the real torchrun starts: ``rdzv`` with --rdzv-id (its run id names the
job), ``plain`` without (a Slurm step running torchrun: SLURM_JOB_ID names it)."""
SKIP = {"late_joiner": 0.0}
"""Rows judged from the start: the late rank's first seconds are the point."""
BEFORE = {"back_to_back": ("job_straggler", ["--extra", "0.10"], 20.0)}
"""Rows started right after another job on the same GPUs: (workload, options, seconds)."""
MODES = ("pods", "slurm", "process")
POD = ("bench", "trainer-0", "trainer")
SLURM_JOB = "4242"
GAUGES = {
    "util": "goodput_gpu_utilization_ratio",
    "graphics": "goodput_gpu_graphics_active_ratio",
    "sm_active": "goodput_gpu_sm_active_ratio",
    "tensor": "goodput_gpu_tensor_active_ratio",
    "dram": "goodput_gpu_dram_active_ratio",
    "power_w": "goodput_gpu_power_watts",
}


def scrape(text: str) -> dict[str, Any]:
    """One /metrics body to {gpu: {column: value, regime, flags}, jobs: ..., info: ...}."""
    from prometheus_client.parser import text_string_to_metric_families

    gpus: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {"gpus": gpus, "stragglers": [], "job_info": {}, "wait": {}}
    names = {v: k for k, v in GAUGES.items()}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            gpu = s.labels.get("gpu")
            row = gpus.setdefault(gpu, {}) if gpu is not None else {}
            if s.name in names and gpu is not None:
                row[names[s.name]] = s.value
            elif s.name == "goodput_gpu_nvlink_bytes_per_second" and gpu is not None:
                row[f"nvlink_{s.labels.get('direction')}"] = s.value
            elif s.name == "goodput_gpu_pcie_bytes_per_second" and gpu is not None:
                row[f"pcie_{s.labels.get('direction')}"] = s.value
            elif s.name == "goodput_gpu_regime" and s.value >= 0.5:
                row["regime"] = s.labels.get("regime")
            elif s.name == "goodput_gpu_busy_unproductive" and s.value >= 0.5:
                row.setdefault("flags", []).append(s.labels.get("reason"))
            elif s.name == "goodput_job_straggler" and s.value >= 0.5:
                out["stragglers"].append(s.labels.get("gpu"))
            elif s.name == "goodput_gpu_job_info":
                out["job_info"][gpu] = f"{s.labels.get('job_source')}:{s.labels.get('job_id')}"
            elif s.name == "goodput_gpu_job_seconds_total":
                out.setdefault("parts", {}).setdefault(gpu, {})[s.labels.get("part")] = s.value
            elif s.name == "goodput_gpu_link_peak_bytes_per_second" and gpu is not None:
                row[f"peak_{s.labels.get('link')}"] = s.value
            elif s.name == "goodput_gpu_job_wait_seconds_total":
                out["wait"][gpu] = s.value
                out.setdefault("wait_job", {})[gpu] = s.labels.get("job_id")
    return out


def daemon_args(mode: str, socket: str | None, simulate: bool) -> list[str]:
    base = ["--interval", "1", "--log-format", "json", "--no-collector.serving",
            "--extended-metrics"]
    if simulate:
        base += ["--simulate", "--simulate-gpus", "2"]
    if mode == "pods" and socket:
        return [*base, "--kubernetes", "--kubelet-socket", socket]
    if mode == "process":
        return [*base, "--no-job-environ"]
    return base


class Watch(threading.Thread):
    """Scrapes one daemon every second into ``windows`` until stopped."""

    def __init__(self, mode: str, daemon: DaemonProcess) -> None:
        super().__init__(daemon=True)
        self.mode, self.d = mode, daemon
        self.windows: list[dict[str, Any]] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        while not self.stop_flag.wait(1.0 - time.time() % 1.0):
            try:
                status, body = http_get(self.d.url + "/metrics", timeout=2)
            except OSError:
                continue
            if status == 200:
                self.windows.append({"t": time.time(), **scrape(body)})


def truth(events: Iterable[Mapping[str, Any]], ready: float, skip: float) -> dict[str, Any]:
    """Each rank's compute, comm and waited share between its first truth after ``skip``
    seconds past ready and its last one (the ranks' own CUDA-event clocks)."""
    by_rank: dict[int, list[Mapping[str, Any]]] = {}
    for e in events:
        # the origin line each rank writes as it says ready may come just before the
        # orchestrator reads ``ready``: a second of slack when judging from the start
        slack = 0.0 if skip else 1.0
        if e.get("event") == "truth" and e.get("time", 0) >= ready + skip - slack:
            by_rank.setdefault(int(e["rank"]), []).append(e)
    deltas: dict[int, dict[str, float]] = {}
    for rank, evs in by_rank.items():
        if len(evs) < 2:
            continue
        first, last = evs[0], evs[-1]
        wall = last["wall_s"] - first["wall_s"]
        deltas[rank] = {k: (last.get(f"{k}_s", 0.0) - first.get(f"{k}_s", 0.0)) / wall
                        for k in ("compute", "comm", "stall")}
        deltas[rank]["steps_per_second"] = (last["steps"] - first["steps"]) / wall
        if "bytes_per_second" in last:
            deltas[rank]["bytes_per_second"] = last["bytes_per_second"]
        pure = last.get("pure_comm_per_step_s")
        if pure is not None:
            deltas[rank]["pure_comm"] = pure * deltas[rank]["steps_per_second"]
    low = min((d["comm"] for d in deltas.values()), default=0.0)
    for d in deltas.values():
        # waited: comm time beyond the transfer alone (timed after a barrier, no rank
        # late), whatever made the rank wait: a slow peer, a rotating heavy rank, a
        # pipeline's fill and drain. waited_relative is beyond the rank that waited least
        # (what the exporter measured before issue 42).
        d["waited"] = max(d["comm"] - d.get("pure_comm", low), 0.0)
        d["waited_relative"] = max(d["comm"] - low, 0.0)
    return {str(r): {k: round(v, 4) for k, v in d.items()} for r, d in sorted(deltas.items())}


def judge(windows: list[dict[str, Any]], ready: float, skip: float, gpus: list[str]
          ) -> dict[str, Any]:
    """What one daemon said about one row after ``skip`` seconds: straggler names, time to
    the first name, regimes, waited share from the counter, raw medians."""
    steady = [w for w in windows if w["t"] >= ready + skip]
    named: dict[str, int] = {}
    for w in steady:
        for gpu in w["stragglers"]:
            named[gpu] = named.get(gpu, 0) + 1
    first = next((w["t"] - ready for w in windows if w["t"] >= ready and w["stragglers"]), None)
    out: dict[str, Any] = {"windows": len(steady), "named": named,
                           "first_named_s": None if first is None else round(first, 1),
                           "job_info": _usual(w["job_info"] for w in steady)}
    for gpu in gpus:
        rows = [w["gpus"].get(gpu, {}) for w in steady]
        regimes = [r.get("regime") or "-" for r in rows]
        g: dict[str, Any] = {"regime": max(set(regimes), key=regimes.count) if regimes else None,
                             "regime_share": round(regimes.count(max(set(regimes),
                                                   key=regimes.count)) / len(regimes), 2)
                             if regimes else None,
                             "flags": sorted({f for r in rows for f in r.get("flags", [])})}
        for col in (*GAUGES, "nvlink_rx", "nvlink_tx", "pcie_rx", "pcie_tx"):
            vals = [r[col] for r in rows if r.get(col) is not None]
            g[col] = round(statistics.median(vals), 4) if vals else None
        waits = [(w["t"], w["wait"][gpu]) for w in steady if gpu in w["wait"]]
        if len(waits) >= 2 and waits[-1][0] > waits[0][0]:
            g["waited"] = round((waits[-1][1] - waits[0][1]) / (waits[-1][0] - waits[0][0]), 4)
        g["split"] = split(steady, gpu)
        out[gpu] = g
    return out


def split(windows: list[dict[str, Any]], gpu: str) -> dict[str, float]:
    """Each part's share of the GPU's job seconds between the first and last window that
    carry the split counters (goodput_gpu_job_seconds_total)."""
    rows = [w.get("parts", {}).get(gpu) for w in windows]
    rows = [r for r in rows if r]
    if len(rows) < 2:
        return {}
    delta = {p: rows[-1].get(p, 0.0) - rows[0].get(p, 0.0) for p in rows[-1]}
    total = sum(delta.values())
    return {p: round(v / total, 4) for p, v in sorted(delta.items())} if total > 0 else {}


def _usual(values: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """The job identities most windows saw (the first and last windows of a row can catch
    the ranks starting or gone)."""
    seen = [json.dumps(v, sort_keys=True) for v in values]
    return json.loads(max(set(seen), key=seen.count)) if seen else {}


def launch(name: str, workload: str, opts: list[str], args: argparse.Namespace,
           job_id: str) -> tuple[list[str], dict[str, str]]:
    """The row's command and environment: the real torchrun for the [lost] rows (with
    --rdzv-id, the run id names the job; without, SLURM_JOB_ID does, as under srun), else
    the workload spawning its own ranks."""
    env = {**NO_MULTICAST, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    extra = ["--dry-run"] if args.simulate else []
    body = [workload, "--seconds", str(args.seconds + SKIP.get(name, 0) + 30), *opts, *extra]
    mode = TORCHRUN.get(name) if not args.simulate and not args.no_torchrun else None
    if mode is None:
        env.update(SLURM_JOB_ID=job_id, SLURM_JOB_NAME=f"bench-{name}")
        return command(*body), child_env(env)
    runner = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    port = str(free_port())
    cmd = [runner, "--nproc-per-node", str(len(_uuids(False)))]
    if mode == "rdzv":
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                "--rdzv-id", f"lost-{name}-{job_id}"]
    else:
        cmd += ["--master-addr", "127.0.0.1", "--master-port", port]
        env.update(SLURM_JOB_ID=job_id, SLURM_JOB_NAME=f"bench-{name}")
    return [*cmd, "-m", "bench.gpu.workloads", *body], child_env(env)


def run_before(name: str, args: argparse.Namespace, log: Any, lock: threading.Lock) -> None:
    """The job that ran on the same GPUs right before this row's (BEFORE)."""
    workload, opts, seconds = BEFORE[name]
    cmd, env = launch("before", workload, opts, args, str(int(SLURM_JOB) - 1))
    proc = WorkloadProcess(f"{name}-before", cmd, REPO, env, log, lock)
    try:
        if proc.wait_ready(args.ready_timeout):
            time.sleep(seconds)
    finally:
        proc.stop()


def run_row(name: str, args: argparse.Namespace, watches: list[Watch], log: Any,
            lock: threading.Lock) -> dict[str, Any]:
    workload, opts = ROWS[name]
    if name in BEFORE:
        run_before(name, args, log, lock)
    cmd, env = launch(name, workload, opts, args, SLURM_JOB)
    skip = SKIP.get(name, args.skip)
    proc = WorkloadProcess(name, cmd, REPO, env, log, lock)
    row: dict[str, Any] = {"workload": workload, "options": opts, "command": cmd[:6],
                           "skip": skip}
    try:
        if not proc.wait_ready(args.ready_timeout):
            row["error"] = (proc.event("error") or {}).get("error", "no ready")
            return row
        ready = time.time()
        marks = {w.mode: len(w.windows) for w in watches}
        while time.time() < ready + args.seconds + skip and proc.proc.poll() is None:
            time.sleep(0.5)
    finally:
        proc.stop()
    info = (proc.event("ready") or {}).get("info", {})
    row["info"] = {k: v for k, v in info.items() if k != "devices"}
    row["truth"] = truth(proc.events, ready, skip)
    gpus = [str(i) for i in range(int(info.get("world") or 2))]
    row["modes"] = {}
    for w in watches:
        windows = w.windows[marks[w.mode]:]
        row["modes"][w.mode] = judge(windows, ready, skip, gpus)
        row["modes"][w.mode]["raw"] = windows
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seconds", type=float, default=45.0, help="steady seconds per row")
    p.add_argument("--skip", type=float, default=8.0, help="seconds after ready not judged")
    p.add_argument("--ready-timeout", type=float, default=120.0)
    p.add_argument("--rows", default=",".join(LOST_ROWS), help=f"of {', '.join(ROWS)}")
    p.add_argument("--no-torchrun", action="store_true", help="spawn ranks, no torchrun")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--daemon-args", default="", help="extra daemon arguments (all modes)")
    p.add_argument("--simulate", action="store_true")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    log = (args.out / "jobs-logs.txt").open("w")
    lock = threading.Lock()
    standin = None
    watches: list[Watch] = []
    result: dict[str, Any] = {"started": datetime.now(UTC).isoformat(), "rows": {}}
    try:
        modes = [m for m in args.modes.split(",") if m]
        if "pods" in modes:
            standin = _standin(args, log)
        for mode in modes:
            socket = standin.socket if standin else None
            extra = args.daemon_args.split() if args.daemon_args else []
            d = DaemonProcess(*daemon_args(mode, socket, args.simulate), *extra,
                              log=args.out / f"daemon-{mode}.log")
            d.start(timeout=60)
            watches.append(Watch(mode, d))
            watches[-1].start()
        for name in [r for r in args.rows.split(",") if r]:
            print(f"[jobs] {name} ...", flush=True)
            result["rows"][name] = run_row(name, args, watches, log, lock)
            (args.out / "jobs.json").write_text(json.dumps(result, indent=1))
            print(f"[jobs] {name}: {summary_line(result['rows'][name])}", flush=True)
    finally:
        for w in watches:
            w.stop_flag.set()
            w.d.stop()
        if standin:
            standin.stop()
        log.close()
    (args.out / "jobs.json").write_text(json.dumps(result, indent=1))
    (args.out / "jobs.md").write_text(render(result))
    print(render(result), flush=True)
    return 0


def _standin(args: argparse.Namespace, log: Any) -> Any:
    """A kubelet stand-in listing one pod that holds every GPU (by UUID)."""
    from bench.gpu.pod_standin import PodResourcesStandIn

    uuids = _uuids(args.simulate)
    log.write(f"# kubelet stand-in: pod {POD} holds {uuids}\n")
    return PodResourcesStandIn({POD: uuids})


def _uuids(simulate: bool) -> list[str]:
    if simulate:
        return [f"GPU-5e1f0000-0000-4000-8000-{i:012d}" for i in range(2)]
    import pynvml

    pynvml.nvmlInit()
    try:
        return [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                for i in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()


def summary_line(row: Mapping[str, Any]) -> str:
    if "error" in row:
        return f"ERROR {row['error']}"
    waited = ", ".join(f"{r}: {d.get('waited')}" for r, d in row["truth"].items())
    parts = [f"truth waited {{{waited}}}"]
    for mode, m in row["modes"].items():
        gpus = {g: (v.get("regime"), v.get("waited")) for g, v in m.items()
                if isinstance(v, dict) and "regime" in v}
        parts.append(f"{mode}: named {m['named']} first {m['first_named_s']} {gpus}")
    return "; ".join(parts)



# --- the report --------------------------------------------------------------------------------

SOURCE = {"pods": "kubernetes", "slurm": "slurm", "process": "process"}
TOLERANCE = 0.05


def expected(row: Mapping[str, Any]) -> tuple[str | None, dict[str, float]]:
    """(the straggler GPU by the ranks' own truth, or None; gpu -> true waited share). A job
    has a straggler when some rank waited at least TOLERANCE of its time: the one that
    waited least."""
    waited = {gpu: d["waited"] for gpu, d in row.get("truth", {}).items() if "waited" in d}
    if len(waited) < 2 or max(waited.values()) < TOLERANCE:
        return None, waited
    return min(waited, key=lambda g: waited[g]), waited


def check(name: str, row: Mapping[str, Any], mode: str) -> tuple[bool, list[str]]:
    """Whether the daemon of ``mode`` got the row right, and why not."""
    m = row["modes"][mode]
    straggler, waited = expected(row)
    gpus = [g for g in m if g.isdigit()]
    why: list[str] = []
    sources = {v.split(":", 1)[0] for v in m["job_info"].values()}
    jobs = {v for v in m["job_info"].values()}
    if len(jobs) != 1 or sources != {SOURCE[mode]} or len(m["job_info"]) < len(gpus):
        why.append(f"job identity {m['job_info']} (want one {SOURCE[mode]} job)")
    named = m["named"]
    others = set(named) - ({straggler} if straggler else set())
    if others:
        why.append(f"named {sorted(others)} (false)")
    if straggler is not None:
        share = named.get(straggler, 0) / max(m["windows"], 1)
        if share < 0.5 or m["first_named_s"] is None or m["first_named_s"] > 120:
            why.append(f"straggler {straggler} named in {share:.0%} of windows, "
                       f"first after {m['first_named_s']} s")
    for gpu, truth_share in waited.items():
        est = m.get(gpu, {}).get("waited")
        if est is None or abs(est - truth_share) > TOLERANCE:
            why.append(f"GPU {gpu} waited {est} vs truth {truth_share}")
    why += _regime_checks(name, m, straggler)
    return not why, why


def _regime_checks(name: str, m: Mapping[str, Any], straggler: str | None) -> list[str]:
    regime = {g: v.get("regime") for g, v in m.items() if g.isdigit()}
    want: dict[str, tuple[str, ...]] = {}
    if name == "p2p_copy":
        want = {g: ("transfer_bound",) for g in regime}
    elif name == "host_stall" and straggler is not None:
        want = {straggler: ("host_bound", "allocated_idle")}
        want.update({g: ("comm_wait",) for g in regime if g != straggler})
    elif name == "straggler_5x" and straggler is not None:
        want = {g: ("comm_wait",) for g in regime if g != straggler}
    return [f"GPU {g} reads {regime.get(g)} (want {'/'.join(ok)})"
            for g, ok in want.items() if regime.get(g) not in ok]


def render(result: Mapping[str, Any]) -> str:
    """jobs.md: one line per row and identity mode, truth beside verdict."""
    lines = ["| row | identity | truth: straggler, waited share per GPU | exporter: straggler "
             "(share of windows, first named), regimes | exporter: waited share per GPU "
             "| check |", "|---|---|---|---|---|---|"]
    for name, row in result["rows"].items():
        if "error" in row:
            lines.append(f"| {name} | - | error: {row['error']} | | | FAIL |")
            continue
        straggler, waited = expected(row)
        truth = (f"{'GPU ' + straggler if straggler else 'none'}; "
                 + ", ".join(f"{g}: {v:.3f}" for g, v in sorted(waited.items())))
        for mode, m in row["modes"].items():
            ok, why = check(name, row, mode)
            gpus = sorted(g for g in m if g.isdigit())
            named = ", ".join(f"GPU {g} ({n / max(m['windows'], 1):.0%}, "
                              f"{m['first_named_s']} s)" for g, n in sorted(m["named"].items()))
            regimes = ", ".join(f"{g}: {m[g]['regime']}" for g in gpus)
            est = ", ".join(f"{g}: {m[g].get('waited', float('nan')):.3f}" for g in gpus)
            lines.append(f"| {name} | {SOURCE.get(mode, mode)} | {truth} | "
                         f"{named or 'none'}; {regimes} | {est} | "
                         f"{'PASS' if ok else 'FAIL: ' + '; '.join(why)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
