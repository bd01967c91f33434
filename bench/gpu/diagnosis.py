"""[diagnosis] validation: the daemon on real NVML next to transfer, sync-loop, collective and
serving workloads, scraped every second; per-window counters and verdicts to JSON + markdown.

One command on the GPU machine (no network needed)::

    PYTHONUNBUFFERED=1 python3 -m bench.gpu.diagnosis --out "$OUT" --seconds 25 \
        [--llama-url http://127.0.0.1:8080]

Workloads (bench/gpu/workloads/diag.py), each in its own subprocess so a crash costs one row, in
this order: on 2+ GPUs allreduce_straggler and allreduce_balanced (NCCL, one process per GPU);
h2d, d2h, sync_loop; serving when ``--llama-url`` is given; on one GPU the stand-ins
standin_wait, standin_waiting_rank and standin_pair (marked STAND-IN in the output). Rows are
shortened to fit ``--budget`` (not below ``--min-seconds``), then skipped.

On 2+ GPUs the daemon gets Kubernetes attribution against a kubelet stand-in
(bench/gpu/pod_standin.py): one pod, ``bench/allreduce-0``, holding every GPU of the machine, so it
judges the all-reduce ranks as one job. Each all-reduce row then records per window which GPU
``goodput_job_straggler`` names and which GPU is in comm_wait, and gets a job check:
allreduce_straggler passes when the slowed rank's GPU is named in at least half of the steady
windows and no other GPU ever is; allreduce_balanced when no GPU is named and no
busy-unproductive flag is raised. (The pod stays for the single-GPU rows too: the daemon is
started once per run, and a pod on a GPU changes no per-GPU verdict.)

Writes ``diagnosis.json`` (rewritten after every workload, so a cut-off run keeps what it
measured), ``diagnosis.md`` and ``diagnosis-logs.txt`` (daemon and workload output).
``--simulate`` runs the pipeline on a machine without a GPU: simulated daemon, dry-run
workloads (the numbers then mean nothing); with ``--gpus 2`` the all-reduce rows read simulated
GPUs that look like their ranks (SIM_RANKS) through the same stand-in wiring.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.gpu import runner
from bench.gpu.analysis import active_label, job_state, parse_exposition, run_lengths
from bench.gpu.pod_standin import PodResourcesStandIn
from bench.gpu.workloads.core import NO_MULTICAST, command
from bench.gpu.workloads.diag import WORKLOADS
from bench.gpu.workloads.process import WorkloadProcess
from testkit.harness import (
    REPO,
    DaemonProcess,
    DaemonStartError,
    child_env,
    http_get,
    run_cmd,
)

SINGLE = ("h2d", "d2h", "sync_loop")
MULTI = ("allreduce_straggler", "allreduce_balanced")
STAND_IN = ("standin_wait", "standin_waiting_rank", "standin_pair")
SETUP = {"allreduce_straggler": 25.0, "allreduce_balanced": 25.0}  # start-up beyond --seconds

# The pod the kubelet stand-in reports on 2+ GPUs: it holds every GPU, so the ranks are one job.
POD = ("bench", "allreduce-0", "trainer")
# The all-reduce rank whose compute is tripled (the GPU the straggler verdict must name), when
# the workload's ready event does not say (dry runs).
STRAGGLER_RANK: dict[str, int | None] = {"allreduce_straggler": 1, "allreduce_balanced": None}
# --simulate: the simulated node's GPUs (exporter/sim/patterns.py NODE, GPU i runs pattern
# i % 12) that stand in for rank 0 and rank 1 of each all-reduce row, each pair one pod: a
# rank spinning in a collective (10) on a compute-bound one (2), and two busy GPUs (14: the
# same GEMM pattern as 2, 6: thermally throttled GEMM).
SIM_GPUS = 15
SIM_RANKS: dict[str, tuple[str, str]] = {"allreduce_straggler": ("10", "2"),
                                         "allreduce_balanced": ("14", "6")}

# column -> (gauge, counter whose per-second rate stands in when the gauge is absent)
RATIOS = {
    "util": ("goodput_gpu_utilization_ratio", "goodput_gpu_utilization_seconds_total"),
    "sm_active": ("goodput_gpu_sm_active_ratio", "goodput_gpu_sm_active_seconds_total"),
    "sm_occupancy": ("goodput_gpu_sm_occupancy_ratio", "goodput_gpu_sm_occupancy_seconds_total"),
    "tensor": ("goodput_gpu_tensor_active_ratio", "goodput_gpu_tensor_active_seconds_total"),
    "dram": ("goodput_gpu_dram_active_ratio", "goodput_gpu_dram_active_seconds_total"),
    "power_w": ("goodput_gpu_power_watts", "goodput_gpu_energy_joules_total"),
}
LINKS = {
    f"{link}_{d}_Bps": (f"goodput_gpu_{link}_bytes_per_second{{direction={d}}}",
                        f"goodput_gpu_{link}_bytes_total{{direction={d}}}")
    for link in ("pcie", "nvlink") for d in ("rx", "tx")
}
COLUMNS = {**RATIOS, **LINKS}


# --- pure helpers -----------------------------------------------------------------------------

def window_row(device: Mapping[str, float], prev: Mapping[str, float] | None,
               dt: float | None) -> dict[str, Any]:
    """One scrape of one GPU (``parse_exposition``'s device dict) to a per-window row; a counter
    rate (against ``prev``, ``dt`` seconds earlier) fills a column whose gauge is absent."""
    row: dict[str, Any] = {}
    for column, (gauge, counter) in COLUMNS.items():
        value = device.get(gauge)
        if value is None and prev and dt and counter in device and counter in prev:
            value = (device[counter] - prev[counter]) / dt
        row[column] = value
    row["regime"] = ",".join(active_label(device, "goodput_gpu_regime", "regime")) or None
    row["unproductive"] = active_label(device, "goodput_gpu_busy_unproductive", "reason")
    prefix = "goodput_gpu_regime_seconds_total{"
    seconds = {k[len(prefix):-1].split("regime=", 1)[-1].split(",", 1)[0]: v
               for k, v in device.items() if k.startswith(prefix)}
    if seconds:
        row["regime_seconds_total"] = seconds
        if prev:
            before = {k[len(prefix):-1].split("regime=", 1)[-1].split(",", 1)[0]: v
                      for k, v in prev.items() if k.startswith(prefix)}
            row["regime_seconds_delta"] = {r: round(v - before.get(r, 0.0), 3)
                                           for r, v in seconds.items()
                                           if v - before.get(r, 0.0) > 1e-6}
    return row


def summarize_rows(rows: list[dict[str, Any]], drop: int) -> dict[str, Any]:
    """Medians of each column after the first ``drop`` windows, the verdict sequence and the
    share of windows with each busy-unproductive reason."""
    steady = rows[drop:] if len(rows) > drop else rows
    out: dict[str, Any] = {"windows": len(rows)}
    for column in COLUMNS:
        vals = [r[column] for r in steady if r.get(column) is not None]
        out[column] = statistics.median(vals) if vals else None
    out["regimes"] = run_lengths(r.get("regime") or "-" for r in rows)
    reasons: dict[str, int] = {}
    for r in steady:
        for reason in r.get("unproductive") or []:
            reasons[reason] = reasons.get(reason, 0) + 1
    out["unproductive_share"] = {k: v / len(steady) for k, v in reasons.items()} if steady else {}
    shares: dict[str, float] = {}
    for r in steady:
        for regime, delta in (r.get("regime_seconds_delta") or {}).items():
            shares[regime] = shares.get(regime, 0.0) + delta
    total = sum(shares.values())
    if total > 0:
        out["regime_seconds_share"] = {k: round(v / total, 3) for k, v in sorted(shares.items())}
    return out


def sim_uuid(index: int) -> str:
    """The UUID ``--simulate`` gives GPU ``index`` (exporter/sim/fake_nvml.py FakeGpu)."""
    return f"GPU-5e1f0000-0000-4000-8000-{index:012d}"


def job_window(t: float, job: str, state: Mapping[str, Mapping[str, Any]],
               rows: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One scrape of a multi-GPU row seen as a job: how many GPUs the daemon judged together
    as ``job`` (None: it did not group them), the GPUs it names straggler, and each sampled
    GPU's regime and busy-unproductive flags (``rows``: gpu -> :func:`window_row`)."""
    mine = state.get(job) or {}
    return {"t": t, "job": job, "job_gpus": mine.get("gpus"),
            "stragglers": list(mine.get("stragglers") or []),
            "regime": {g: r.get("regime") for g, r in rows.items()},
            "unproductive": {g: list(r.get("unproductive") or []) for g, r in rows.items()}}


def job_summary(windows: list[dict[str, Any]], gpus: list[str], expected: str | None,
                drop: int) -> dict[str, Any]:
    """Counts over the windows after the first ``drop`` (:func:`job_window` records) and the
    job check: with ``expected`` (the slowed rank's GPU) the straggler verdict must name it in
    at least half of the windows and never name another GPU; without, it must name none and no
    busy-unproductive flag may be raised. Either way the daemon must have judged the GPUs as
    one job, else a missing straggler proves nothing."""
    steady = windows[drop:] if len(windows) > drop else windows
    m = len(steady)
    named: dict[str, int] = {}
    for w in steady:
        for g in w.get("stragglers") or []:
            named[g] = named.get(g, 0) + 1
    comm_wait = {g: sum(1 for w in steady if (w.get("regime") or {}).get(g) == "comm_wait")
                 for g in gpus}
    flagged = {g: sum(1 for w in steady if (w.get("unproductive") or {}).get(g)) for g in gpus}
    grouped = sum(1 for w in steady if (w.get("job_gpus") or 0) >= 2)
    out: dict[str, Any] = {
        "job": steady[0].get("job") if steady else None, "windows": m,
        "grouped_windows": grouped, "expected_straggler": expected,
        "straggler_windows": dict(sorted(named.items())), "comm_wait_windows": comm_wait,
        "unproductive_windows": flagged,
        "straggler_sequence": run_lengths(",".join(w.get("stragglers") or []) or "-"
                                          for w in windows),
    }
    others = sorted(g for g in named if g != expected)
    if not m:
        ok, why = False, "no windows"
    elif grouped == 0:
        ok, why = False, ("the daemon never judged the GPUs as one job (no goodput_job_gpus "
                          ">= 2): pod attribution missing")
    elif expected is not None:
        hits = named.get(expected, 0)
        ok = 2 * hits >= m and not others
        waits = ", ".join(f"GPU {g} {n}/{m}" for g, n in comm_wait.items() if g != expected)
        why = f"straggler GPU {expected} (the slowed rank) named in {hits}/{m} windows" + (
            f"; other GPUs named: {', '.join(f'{g} x{named[g]}' for g in others)}"
            if others else "") + (f"; comm_wait: {waits}" if waits else "")
    else:
        flags = sum(flagged.values())
        ok = not named and not flags
        why = (f"{sum(named.values())} straggler windows "
               f"({', '.join(f'GPU {g} x{n}' for g, n in sorted(named.items())) or 'none'}), "
               f"{flags} busy-unproductive GPU-windows, in {m} windows")
    out["check"] = {"ok": ok, "why": why}
    return out


def job_cell(job: Mapping[str, Any] | None, gpu: str) -> str:
    """The main table's job column for one GPU of a multi-GPU row."""
    if not job:
        return "-"
    m = job.get("windows", 0)
    return (f"straggler {job.get('straggler_windows', {}).get(gpu, 0)}/{m}, comm_wait "
            f"{job.get('comm_wait_windows', {}).get(gpu, 0)}/{m}")


def markdown(result: Mapping[str, Any]) -> str:
    def num(value: Any, scale: float = 1.0, digits: int = 2) -> str:
        return "-" if value is None else f"{value / scale:.{digits}f}"

    gpu = result.get("gpu") or {}
    lines = [
        "# Diagnosis run",
        "",
        f"GPU: {gpu.get('name', '?')} x{gpu.get('count', '?')}, driver "
        f"{gpu.get('driver_version', '?')}; started {result.get('started')}, "
        f"{result.get('elapsed_seconds', 0):.0f} s; daemon `{result.get('daemon_command')}`"
        + (" — SIMULATED (pipeline check only)" if result.get("simulate") else ""),
        "",
        "| workload | gpu | status | windows | util | SM | occ | tensor | DRAM | PCIe rx/tx GB/s "
        "| NVLink rx/tx GB/s | W | verdicts (windows) | unproductive | regime_seconds share "
        "| job (steady windows) | expert |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in (result.get("workloads") or {}).items():
        per_gpu = entry.get("summary") or {}
        label = name + (" (STAND-IN)" if entry.get("stand_in") else "")
        if not per_gpu:
            lines.append(f"| {label} | - | {entry.get('status')}: {entry.get('error', '')} "
                         "| 0 | | | | | | | | | | | | | " + entry.get("expert", "") + " |")
            continue
        for g, s in per_gpu.items():
            seq = " > ".join(f"{r} x{n}" for r, n in s.get("regimes", []))
            flags = ", ".join(f"{k} {v:.0%}" for k, v in s.get("unproductive_share", {}).items())
            share = ", ".join(f"{k} {v:.0%}" for k, v in
                              (s.get("regime_seconds_share") or {}).items())
            lines.append(
                f"| {label} | {g} | {entry.get('status')} | {s['windows']} | {num(s['util'])} "
                f"| {num(s['sm_active'])} | {num(s['sm_occupancy'])} | {num(s['tensor'])} "
                f"| {num(s['dram'])} | {num(s['pcie_rx_Bps'], 1e9, 1)}/"
                f"{num(s['pcie_tx_Bps'], 1e9, 1)} | {num(s['nvlink_rx_Bps'], 1e9, 1)}/"
                f"{num(s['nvlink_tx_Bps'], 1e9, 1)} | {num(s['power_w'], 1, 0)} | {seq} "
                f"| {flags or '-'} | {share or '-'} | {job_cell(entry.get('job'), g)} "
                f"| {entry.get('expert', '')} |")
    lines += ["", "Medians over the windows after the first "
              f"{result.get('args', {}).get('drop', '?')}; verdicts are the debounced "
              "`goodput_gpu_regime` state per window, in order; job: windows in which "
              "`goodput_job_straggler` names the GPU, and in which its regime is comm_wait.", ""]
    pods = result.get("pods") or {}
    if pods:
        lines.append(f"- kubelet stand-in: {pods.get('error') or pods.get('pods')}, "
                     f"{pods.get('list_calls', 0)} List calls")
    for name, entry in (result.get("workloads") or {}).items():
        stats = entry.get("stats") or {}
        job = entry.get("job")
        if job:
            check = job.get("check") or {}
            seq = " > ".join(f"{r} x{n}" for r, n in job.get("straggler_sequence", []))
            lines.append(f"- **{name} job check: {'PASS' if check.get('ok') else 'FAIL'}**: "
                         f"{check.get('why')}; job {job.get('job')} grouped in "
                         f"{job.get('grouped_windows')}/{job.get('windows')} windows; "
                         f"straggler per window: {seq or '-'}")
        if entry.get("stand_in"):
            lines.append(f"- **{name} is a STAND-IN** on one GPU: {entry.get('description')}")
        if name == "serving" and stats.get("bursts"):
            for b in stats["bursts"]:
                lines.append(f"- serving burst {b['end'] - b['start']:.0f} s, {b['streams']} "
                             f"streams: {b['tokens']} tokens, {b['tokens_per_second']:.0f} "
                             "tokens/s (client side)")
        for rank in entry.get("ranks") or []:
            lines.append(f"- {name} rank {rank.get('rank')}: {rank.get('compute_units')} compute "
                         f"units/step, {rank.get('steps_per_second', 0):.1f} steps/s")
    lines += ["", "## Per window", ""]
    for name, entry in (result.get("workloads") or {}).items():
        if not entry.get("windows"):
            continue
        lines += [f"### {name}", "", "| t | gpu | util | SM | occ | tensor | DRAM | PCIe rx/tx "
                  "GB/s | NVLink rx/tx GB/s | W | verdict | unproductive | regime s (window) "
                  "| straggler | client tok |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for w in entry["windows"]:
            delta = ",".join(f"{k}:{v:g}" for k, v in (w.get("regime_seconds_delta") or {}).items())
            lines.append(
                f"| {w['t']:.0f} | {w['gpu']} | {num(w['util'])} | {num(w['sm_active'])} "
                f"| {num(w['sm_occupancy'])} | {num(w['tensor'])} | {num(w['dram'])} "
                f"| {num(w['pcie_rx_Bps'], 1e9, 1)}/{num(w['pcie_tx_Bps'], 1e9, 1)} "
                f"| {num(w['nvlink_rx_Bps'], 1e9, 1)}/{num(w['nvlink_tx_Bps'], 1e9, 1)} "
                f"| {num(w['power_w'], 1, 0)} | {w.get('regime') or '-'} "
                f"| {','.join(w.get('unproductive') or []) or '-'} | {delta or '-'} "
                f"| {_straggler_mark(w)} | {w.get('client_tokens', '')} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _straggler_mark(window: Mapping[str, Any]) -> str:
    """Per-window table: "yes" when the straggler verdict names this GPU; "" outside jobs."""
    if "straggler" not in window:
        return ""
    return "yes" if window["straggler"] else "-"


# --- the run ----------------------------------------------------------------------------------

class Diagnosis:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        self.log = (self.out / "diagnosis-logs.txt").open("a")
        self.lock = threading.Lock()
        self.daemon: DaemonProcess | None = None
        self.pods: PodResourcesStandIn | None = None
        self.pod_args: list[str] = []
        self.result: dict[str, Any] = {
            "schema": 1, "started": runner.now(), "simulate": args.simulate,
            "args": vars(args), "gpu": {}, "workloads": {}, "complete": False,
        }

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def say(self, msg: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {msg}", flush=True)

    def save(self) -> None:
        self.result["elapsed_seconds"] = self.elapsed()
        tmp = self.out / "diagnosis.json.tmp"
        tmp.write_text(json.dumps(self.result, indent=1, default=str))
        tmp.replace(self.out / "diagnosis.json")
        (self.out / "diagnosis.md").write_text(markdown(self.result))

    def gpu_info(self) -> int:
        if self.args.simulate:
            self.result["gpu"] = {"name": "simulated", "count": self.args.gpus or 2}
            return int(self.args.gpus or 2)
        fields = "name,driver_version,pci.bus_id,uuid"
        rc, text = run_cmd(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"])
        gpus = [dict(zip(fields.split(","), (v.strip() for v in ln.split(",")), strict=False))
                for ln in text.splitlines() if ln.strip()] if rc == 0 else []
        count = self.args.gpus or len(gpus)
        self.result["gpu"] = {**(gpus[0] if gpus else {"error": text.strip()[:300]}),
                              "count": count, "all": gpus}
        return count

    def gpu_uuids(self) -> list[str]:
        """UUIDs of the machine's GPUs in NVML index order: nvidia-smi's, else pynvml's."""
        uuids = [g.get("uuid", "") for g in self.result["gpu"].get("all") or []]
        if uuids and all(uuids):
            return uuids
        try:
            import pynvml

            pynvml.nvmlInit()
            try:
                return [str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
                        for i in range(pynvml.nvmlDeviceGetCount())]
            finally:
                pynvml.nvmlShutdown()
        except Exception as exc:
            self.say(f"GPU UUIDs: {type(exc).__name__}: {exc}")
            return []

    def start_pods(self) -> None:
        """Serve the all-reduce ranks' pod(s) on a kubelet stand-in and point the daemon at it
        (``self.pod_args``); on failure (no grpcio, no UUIDs) the run goes on without pods and
        the job checks say that the daemon never grouped the GPUs."""
        if self.args.simulate:
            pods = {(POD[0], f"allreduce-{i}", POD[2]): [sim_uuid(int(g)) for g in ranks]
                    for i, ranks in enumerate(SIM_RANKS.values())}
        else:
            uuids = self.gpu_uuids()[: self.result["gpu"].get("count") or None]
            pods = {POD: uuids} if len(uuids) >= 2 else {}
        if not pods:
            self.result["pods"] = {"error": "no GPU UUIDs to give the pod"}
            return
        try:
            self.pods = PodResourcesStandIn(pods)
        except Exception as exc:
            self.result["pods"] = {"error": f"kubelet stand-in: {type(exc).__name__}: {exc}"}
            self.say(self.result["pods"]["error"])
            return
        self.result["pods"] = self.pods.describe()
        self.say(f"kubelet stand-in on {self.pods.socket}: {self.pods.pods}")
        self.pod_args = ["--kubernetes", "--kubelet-socket", self.pods.socket,
                         "--kubelet-interval", "1"]
        if self.args.simulate:
            self.pod_args += ["--simulate-gpus", str(SIM_GPUS)]

    def rank_gpus(self, name: str, gpus: int) -> list[str]:
        """The GPUs a row runs on, rank order (CUDA_DEVICE_ORDER=PCI_BUS_ID: rank i on NVML
        index i); on --simulate the all-reduce rows read the GPUs that look like their ranks."""
        need = WORKLOADS[name][0]
        if self.args.simulate and name in SIM_RANKS and self.pods is not None:
            return list(SIM_RANKS[name])
        return [str(g) for g in range(min(gpus, max(need, 1)))] if need > 1 else ["0"]

    def job_name(self, name: str) -> str:
        if self.args.simulate and name in SIM_RANKS:
            return f"{POD[0]}/allreduce-{list(SIM_RANKS).index(name)}"
        return f"{POD[0]}/{POD[1]}"

    def expected_straggler(self, name: str, ranks: list[str], info: Mapping[str, Any]
                           ) -> str | None:
        """The slowed rank's GPU: by its UUID when the workload reported one, else rank i on
        ``ranks[i]``."""
        rank = info.get("straggler_rank") if "straggler_rank" in info else STRAGGLER_RANK[name]
        if rank is None or not 0 <= int(rank) < len(ranks):
            return None
        rank = int(rank)
        devices = info.get("devices") or []
        torch_uuid = str(devices[rank].get("uuid") or "") if len(devices) > rank else ""
        if torch_uuid:
            want = torch_uuid.lower().removeprefix("gpu-")
            for index, uuid in enumerate(self.gpu_uuids()):
                if uuid.lower().removeprefix("gpu-") == want:
                    return str(index)
        return ranks[int(rank)]

    def start_daemon(self) -> bool:
        """Start the daemon; on a refused flag or config (exit 2) retry with less: first
        without the serving target, then without ``--daemon-args`` too."""
        base = ["--interval", str(self.args.interval)]
        if self.args.simulate:
            base.append("--simulate")
        base += self.pod_args
        extra = shlex.split(self.args.daemon_args)
        serving: dict[str, Any] = {}
        if self.args.llama_url and self.args.llama_metrics:
            serving = {"serving": {"interval": self.args.interval, "targets": [
                {"url": self.args.llama_url.rstrip("/") + "/metrics", "gpus": ["0"]}]}}
        attempts: list[tuple[list[str], dict[str, Any]]] = []
        for attempt in ((extra, serving), (extra, {}), ([], {})):
            if attempt not in attempts:
                attempts.append(attempt)
        for args, config in attempts:
            self.daemon = DaemonProcess(*base, *args, log=self.log, config=config)
            try:
                self.daemon.start(timeout=60, ready_path="/readyz")
            except DaemonStartError as exc:
                self.result["daemon_error"] = str(exc)
                self.say(f"daemon: {exc}")
                if exc.exit_code == 2:
                    continue  # a flag or the config was refused: try with less
                return False
            self.result["daemon_command"] = shlex.join(self.daemon.command())
            self.result["daemon_config"] = config
            self.result.pop("daemon_error", None)
            self.say(f"daemon ready in {self.daemon.ready_seconds:.1f}s at {self.daemon.url}")
            return True
        return False

    def plan(self, gpus: int) -> list[str]:
        if self.args.workloads:
            return [w for w in self.args.workloads.split(",") if w]
        # The rarest evidence first: the 2-GPU rows, then real rows, the stand-ins last.
        names = [*(MULTI if gpus >= 2 else ()), *SINGLE]
        if self.args.llama_url:
            names.append("serving")
        return names + ([] if gpus >= 2 else list(STAND_IN))

    def workload_args(self, name: str, seconds: float) -> list[str]:
        a = self.args
        limit = seconds + a.settle + SETUP.get(name, 0.0) + 60  # safety; we stop it earlier
        out = ["--seconds", str(limit)]
        if a.simulate:
            out.append("--dry-run")
        if name == "serving":
            out += ["--url", a.llama_url, "--streams", str(a.streams), "--bursts", a.bursts,
                    "--gap", str(a.gap)]
        return out + shlex.split(a.workload_args)

    def run_workload(self, name: str, gpus: int, seconds: float) -> None:
        need, expert, description = WORKLOADS[name]
        entry: dict[str, Any] = {"expert": expert, "description": description,
                                 "stand_in": name in STAND_IN, "status": "running",
                                 "gpus_needed": need, "windows": []}
        self.result["workloads"][name] = entry
        if need > gpus:
            entry.update(status="skipped", error=f"needs {need} GPUs, {gpus} here")
            self.say(f"{name}: skipped ({entry['error']})")
            return
        if self.daemon is None or not self.daemon.alive():
            entry.update(status="error", error="daemon not running")
            return
        self.say(f"{name}: start")
        entry["sample_seconds"] = round(seconds, 1)
        work = WorkloadProcess(name, command(name, *self.workload_args(name, seconds)), REPO,
                               child_env(NO_MULTICAST), self.log, self.lock)
        try:
            timeout = 60.0 + SETUP.get(name, 0.0)
            work.ready.wait(timeout)
            ready = work.event("ready")
            if ready is None:
                err = (work.event("error") or {}).get("error") or (
                    f"not ready after {timeout:.0f}s (exit {work.proc.poll()})")
                raise RuntimeError(err)
            entry["info"] = ready.get("info", {})
            duration = float(entry["info"].get("duration") or seconds)
            ranks = self.rank_gpus(name, gpus)
            if need > 1:
                entry["rank_gpus"] = ranks
                entry["job_windows"] = []
            self.sample(entry, work, duration + self.args.settle, ranks,
                        self.job_name(name) if need > 1 else None)
            entry["status"] = "ok"
        except Exception as exc:
            entry.update(status="error", error=f"{type(exc).__name__}: {exc}")
            self.say(f"{name}: ERROR {entry['error']}")
        finally:
            entry["exit_code"] = work.stop()
            done = work.event("done")
            if done:
                entry["stats"] = done.get("stats", {})
            entry["ranks"] = [e for e in work.events if e.get("event") == "rank_stats"]
            err = work.event("error")
            if err and "error" not in entry:
                entry["error"] = err.get("error")
        tokens = {int(k): v for k, v in
                  ((entry.get("stats") or {}).get("tokens_per_wall_second") or {}).items()}
        if tokens:
            for w in entry["windows"]:  # tokens made in the second before this scrape
                w["client_tokens"] = tokens.get(int(w["wall"]) - 1, 0)
        by_gpu: dict[str, list[dict[str, Any]]] = {}
        for w in entry["windows"]:
            by_gpu.setdefault(w["gpu"], []).append(w)
        entry["summary"] = {g: summarize_rows(rows, self.args.drop) for g, rows in by_gpu.items()}
        for g, s in entry["summary"].items():
            self.say(f"{name} gpu {g}: util {s['util']} sm {s['sm_active']} "
                     f"regimes {s['regimes']} flags {s['unproductive_share']}")
        if "job_windows" in entry:
            ranks = entry["rank_gpus"]
            expected = self.expected_straggler(name, ranks, entry.get("info") or {})
            entry["job"] = job_summary(entry["job_windows"], ranks, expected, self.args.drop)
            self.result.setdefault("job_checks", {})[name] = entry["job"]["check"]
            self.say(f"{name} job check: {'PASS' if entry['job']['check']['ok'] else 'FAIL'}: "
                     f"{entry['job']['check']['why']}")
        if self.pods is not None:
            self.result["pods"] = self.pods.describe()
        self.save()

    def sample(self, entry: dict[str, Any], work: WorkloadProcess, seconds: float,
               gpus: list[str], job: str | None = None) -> None:
        """Scrape every interval; per GPU a :func:`window_row`, and with ``job`` (a multi-GPU
        row) per scrape a :func:`job_window`."""
        assert self.daemon is not None
        prev: dict[str, tuple[float, dict[str, float]]] = {}
        t0 = time.monotonic()
        n = round(seconds / self.args.interval)
        for i in range(n + 1):
            time.sleep(max(0.0, t0 + i * self.args.interval - time.monotonic()))
            if work.proc.poll() is not None and i > 0:
                work.thread.join(timeout=5)  # read its last lines
                if work.event("done") is None:
                    raise RuntimeError(f"workload exited early with {work.proc.returncode}: "
                                       f"{(work.event('error') or {}).get('error', '')}")
                break  # a workload with its own timeline (serving) has finished
            try:
                status, body = http_get(self.daemon.url + "/metrics", timeout=5.0)
                if status != 200:
                    raise RuntimeError(f"/metrics answered {status}")
                parsed = {gpu: parse_exposition(body, gpu) for gpu in gpus}
                jobs = job_state(body) if job else {}
            except Exception as exc:  # one lost window, not the row
                entry.setdefault("scrape_errors", []).append(
                    {"t": round(time.monotonic() - t0, 2), "error": f"{type(exc).__name__}: {exc}"})
                continue
            now = time.monotonic()
            rows: dict[str, dict[str, Any]] = {}
            for gpu in gpus:
                device, _node = parsed[gpu]
                last = prev.get(gpu)
                row = window_row(device, last[1] if last else None,
                                 now - last[0] if last else None)
                row.update(t=round(now - t0, 2), wall=round(time.time(), 2), gpu=gpu)
                if job:
                    row["straggler"] = gpu in ((jobs.get(job) or {}).get("stragglers") or [])
                if self.args.raw:
                    row["raw"] = device
                entry["windows"].append(row)
                rows[gpu] = row
                prev[gpu] = (now, device)
            if job:
                entry["job_windows"].append(job_window(round(now - t0, 2), job, jobs, rows))

    def overhead(self, name: str) -> float:
        """Seconds a row costs beyond its sampling: start-up, stop, settling."""
        return float(2 * self.args.settle + 8.0 + SETUP.get(name, 0.0))

    def serving_seconds(self) -> float:
        bursts = [float(b.split(":")[0]) for b in self.args.bursts.split(",") if b]
        return float((len(bursts) + 1) * self.args.gap + sum(bursts))

    def row_seconds(self, names: list[str], gpus: int) -> float:
        """Sampling time for the next row: ``--seconds``, shortened (not below
        ``--min-seconds``) so the rows still to run fit in ``--budget``."""
        rows = [n for n in names if n in WORKLOADS and WORKLOADS[n][0] <= gpus]
        fixed = sum(self.serving_seconds() + self.overhead(n) for n in rows if n == "serving")
        timed = [n for n in rows if n != "serving"]
        if not timed:
            return float(self.args.seconds)
        left = self.args.budget - self.elapsed() - fixed - sum(self.overhead(n) for n in timed)
        floor = min(self.args.min_seconds, self.args.seconds)
        return float(max(floor, min(self.args.seconds, left / len(timed))))

    def run(self) -> None:
        gpus = self.gpu_info()
        self.say(f"GPUs: {gpus} {self.result['gpu'].get('name', '')}")
        names = self.plan(gpus)
        if gpus >= 2 and any(n in MULTI for n in names):
            self.start_pods()
        if not self.start_daemon():
            self.save()
            return
        time.sleep(self.args.settle)
        for i, name in enumerate(names):
            if name not in WORKLOADS:
                self.result["workloads"][name] = {"status": "error", "error": "unknown workload"}
                continue
            seconds = self.row_seconds(names[i:], gpus)
            sampled = self.serving_seconds() if name == "serving" else seconds
            if (WORKLOADS[name][0] <= gpus
                    and self.elapsed() + sampled + self.overhead(name) > self.args.budget):
                self.result["workloads"][name] = {
                    "status": "skipped", "expert": WORKLOADS[name][1],
                    "error": f"budget: {self.elapsed():.0f}s used of {self.args.budget:.0f}s"}
                self.say(f"{name}: skipped (budget)")
                continue
            if self.daemon is None or not self.daemon.alive():
                self.say("daemon is not running: starting it again")
                if not self.start_daemon():
                    break
            self.run_workload(name, gpus, seconds)
            time.sleep(self.args.settle)  # let the GPU go quiet between rows
        self.result["complete"] = True

    def close(self) -> None:
        if self.daemon is not None:
            self.result["daemon_rss"] = self.daemon.rss()
            self.result["daemon_cpu_seconds"] = self.daemon.cpu_seconds()
            code, _ = self.daemon.stop()
            self.result["daemon_exit_code"] = code
        if self.pods is not None:
            self.result["pods"] = self.pods.describe()
            self.pods.stop()
            self.pods = None
        self.result["finished"] = runner.now()
        self.save()
        self.log.close()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "diagnosis-out"))
    p.add_argument("--seconds", type=float, default=25.0, help="sampling time per workload")
    p.add_argument("--min-seconds", type=float, default=12.0,
                   help="shortest sampling time when rows are shortened to fit --budget")
    p.add_argument("--settle", type=float, default=3.0,
                   help="seconds after the daemon starts and between workloads")
    p.add_argument("--drop", type=int, default=3,
                   help="windows after ready left out of the medians")
    p.add_argument("--interval", type=float, default=1.0, help="daemon poll and scrape period")
    p.add_argument("--budget", type=float, default=300.0,
                   help="rows are shortened (--min-seconds) and then skipped to end within "
                        "this many seconds")
    p.add_argument("--workloads", default="", help=f"comma-separated subset of {list(WORKLOADS)}"
                   " (default: by GPU count)")
    p.add_argument("--gpus", type=int, default=0, help="GPU count (default: nvidia-smi)")
    p.add_argument("--daemon-args", default="--extended-metrics",
                   help="extra daemon flags, dropped if the daemon refuses them (exit 2)")
    p.add_argument("--llama-url", default="", help="llama-server base URL for the serving row")
    p.add_argument("--llama-metrics", action="store_true",
                   help="also give the daemon llama-server's /metrics as a serving target")
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--bursts", default="3:1,3,8",
                   help="serving bursts, SECONDS[:STREAMS],... (STREAMS defaults to --streams)")
    p.add_argument("--gap", type=float, default=6.0, help="idle seconds around serving bursts")
    p.add_argument("--workload-args", default="",
                   help="extra workload args (python -m bench.gpu.workloads NAME --help)")
    p.add_argument("--raw", action="store_true", help="keep every GPU series in each window")
    p.add_argument("--simulate", action="store_true",
                   help="no GPU: simulated daemon, dry-run workloads (pipeline check)")
    return p


def _start(args: argparse.Namespace) -> Diagnosis:
    os.environ.update(NO_MULTICAST)
    return Diagnosis(args)


def _finish(run: Diagnosis) -> None:
    run.say(f"wrote {run.out / 'diagnosis.json'} and diagnosis.md")


def main(argv: list[str] | None = None) -> int:
    return runner.main(parser(), _start, _finish, argv)


if __name__ == "__main__":
    sys.exit(main())
