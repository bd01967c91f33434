"""Real-GPU validation: run the daemon next to a panel of known workloads and record what it saw.

One run, standalone, on a machine with an NVIDIA GPU, torch and the exporter's dependencies
(no network needed)::

    PYTHONUNBUFFERED=1 python3 -m bench.gpu.gpu_validation --out "$OUT" --seconds 25

It writes, incrementally (each workload rewrites the JSON, so a cut-off run still leaves
everything measured so far):

* ``validation.json``: GPU identity, daemon poll cost (CPU, RSS, poll durations), which NVML
  readings / GPM metric ids worked, and per workload 1 s samples of the daemon's gpu-0 series
  next to ``nvidia-smi``, with steady-state medians and regime timing;
* ``daemon.log`` (the daemon's JSON log), ``workloads.log`` (workload output),
  ``nvidia-smi-q.txt`` and raw ``/metrics`` captures.

A failing workload or daemon start is recorded and the run goes on. ``--simulate`` runs the
whole pipeline on a machine without a GPU (simulated daemon, dry-run workloads), reading for
each workload the simulated GPU that plays the same pattern.
``bench/gpu/report.py`` turns the JSON into docs/validation/*.md. The pure analysis lives in
``bench/gpu/analysis.py``; starting the daemon and other process plumbing in
``testkit/harness.py`` (shared with the tests); the workloads in
``bench/gpu/workloads/panel.py``, started as ``python -m bench.gpu.workloads NAME``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench.gpu import runner
from bench.gpu.analysis import (  # noqa: F401
    DEVICE_LABELS,
    active_label,
    counter_rate,
    gpu_kind,
    log_support,
    log_windows_to_regime,
    median,
    parse_exposition,
    regime_changes,
    run_lengths,
    series_key,
    steady_start,
    summarize,
    windows_from_steady,
)
from bench.gpu.workloads import core as workloads
from bench.gpu.workloads.panel import (
    DESCRIPTIONS,
    EXPECTED,
    MODEL_NAME,
    NO_PROCESS,
    SERVING,
    WORKLOADS,
    DecoderShape,
)
from bench.gpu.workloads.process import WorkloadProcess
from testkit.harness import (  # noqa: F401
    DaemonProcess,
    DaemonStartError,
    child_env,
    free_port,
    http_get,
    parse_smi_csv,
    proc_cpu_seconds,
    proc_rss_bytes,
    run_cmd,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# bench/footprint/scrape_latency.py and tests/test_bench_report.py.

SCHEMA = 1
SMI_FIELDS = ("utilization.gpu", "utilization.memory", "power.draw", "memory.used", "clocks.sm",
              "temperature.gpu")
SMI_INFO_FIELDS = ("index", "name", "uuid", "driver_version", "pci.bus_id", "memory.total",
                   "power.limit", "clocks.max.sm", "clocks.max.mem", "compute_cap")
# Simulated node: which simulated GPU plays each workload's pattern (see exporter/sim).
SIM_GPU = {
    "idle": "0", "allocated_idle": "1", "large_gemm": "2", "hbm_copy": "3",
    "transformer_decode": "3", "small_gemm_sync": "4", "large_kernels_host_sleep": "4",
    "tiny_kernels": "5",
}
PHASE_OVERHEAD = {"transformer_decode": 45.0}  # start-up beyond --seconds, for the budget


# --- the daemon -------------------------------------------------------------------------------

@dataclass
class Daemon:
    """One daemon process (a phase) started through :class:`harness.DaemonProcess`; records
    start time, readiness and CPU/RSS."""

    phase: str
    python: str
    port: int
    interval: float
    log: IO[str]
    simulate: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    process: DaemonProcess | None = None
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return self.process.url if self.process else f"http://127.0.0.1:{self.port}"

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.process.proc if self.process else None

    def args(self) -> list[str]:
        args = ["--interval", str(self.interval), "--log-format", "json"]
        return [*args, "--simulate"] if self.simulate else args

    def start(self, timeout: float = 45.0, optional: Mapping[str, Any] | None = None) -> bool:
        """Start and wait for /readyz; on a config error (exit 2) retry without ``optional``."""
        attempts = [dict(self.config, **optional)] if optional else []
        attempts.append(dict(self.config))
        for config in attempts:
            if self._start_once(config, timeout):
                return True
            if self.record.get("exit_code") != 2:
                return False
        return False

    def _start_once(self, config: dict[str, Any], timeout: float) -> bool:
        self.log.write(f"# --- phase {self.phase}\n")
        self.process = DaemonProcess(*self.args(), port=self.port, python=self.python,
                                     log=self.log, config=config)
        self.record = {"phase": self.phase, "config": config, "started": time.time()}
        try:
            self.process.start(timeout=timeout, ready_path="/readyz", keep_unready=True)
        except DaemonStartError as exc:
            self.record.update(command=self.process.command(), error=str(exc))
            if exc.exit_code is not None:
                self.record["exit_code"] = exc.exit_code
            return False
        self.port = self.process.port
        self.record.update(command=self.process.command(), port=self.port,
                           ready_seconds=self.process.ready_seconds)
        if self.process.ready_seconds is None:
            self.record["error"] = f"not ready after {timeout:.0f}s (kept running)"
        return True

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def cpu(self) -> float | None:
        return self.process.cpu_seconds() if self.process else None

    def scrape(self, gpu: str) -> tuple[dict[str, float], dict[str, float], str]:
        status, body = http_get(self.base + "/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        device, node = parse_exposition(body, gpu)
        return device, node, body

    def stop(self) -> None:
        if self.process is None or self.process.proc is None:
            return
        if self.process.alive():
            self.record["rss"] = self.process.rss()
            self.record["cpu_seconds_total"] = self.process.cpu_seconds()
        code, killed = self.process.stop()
        if killed:
            self.record["killed"] = True
        self.record["exit_code"] = code
        self.record["stopped"] = time.time()


# --- workloads --------------------------------------------------------------------------------

class Validation:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.t_start = time.monotonic()
        self.daemon_log = (self.out / "daemon.log").open("a")
        self.work_log = (self.out / "workloads.log").open("a")
        self.lock = threading.Lock()
        self.result: dict[str, Any] = {
            "schema": SCHEMA,
            "started": runner.now(),
            "finished": None,
            "complete": False,
            "simulate": bool(args.simulate),
            "args": {k: v for k, v in vars(args).items()},
            "host": _host_info(),
            "gpu": {},
            "daemon": {"phases": []},
            "poll_cost": {},
            "support": {},
            "workloads": {},
        }
        self.daemon: Daemon | None = None

    # bookkeeping
    def elapsed(self) -> float:
        return time.monotonic() - self.t_start

    def save(self) -> None:
        tmp = self.out / "validation.json.tmp"
        tmp.write_text(json.dumps(self.result, indent=1, sort_keys=True, default=str))
        tmp.replace(self.out / "validation.json")

    def say(self, msg: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {msg}", flush=True)

    def workload_args(self) -> list[str]:
        if self.args.workload_args:
            return shlex.split(self.args.workload_args)
        return ["--dry-run"] if self.args.simulate else []

    def target_gpu(self, workload: str) -> str:
        return SIM_GPU.get(workload, "0") if self.args.simulate else "0"

    # steps
    def gpu_info(self) -> None:
        if shutil.which("nvidia-smi") is None:
            self.result["gpu"] = {"error": "nvidia-smi not found"}
            return
        rc, text = run_cmd(["nvidia-smi", "-q"], timeout=30)
        (self.out / "nvidia-smi-q.txt").write_text(text)
        fields = list(SMI_INFO_FIELDS)
        rc, text = run_cmd(["nvidia-smi", "-i", "0", f"--query-gpu={','.join(fields)}",
                            "--format=csv,noheader,nounits"])
        if rc != 0:  # older drivers lack compute_cap
            fields.remove("compute_cap")
            rc, text = run_cmd(["nvidia-smi", "-i", "0", f"--query-gpu={','.join(fields)}",
                                "--format=csv,noheader,nounits"])
        info: dict[str, Any] = (parse_smi_csv(text, fields) if rc == 0
                                else {"error": text.strip()[:300]})
        rc, listing = run_cmd(["nvidia-smi", "-L"])
        info["count"] = sum(1 for ln in listing.splitlines() if ln.startswith("GPU "))
        self.result["gpu"] = info

    def start_daemon(self, phase: str, serving_gpu: str | None, serving_port: int) -> bool:
        config: dict[str, Any] = {}
        if serving_gpu is not None:
            config["serving"] = {
                "interval": self.args.interval,
                "targets": [{"url": f"http://127.0.0.1:{serving_port}/metrics",
                             "gpus": [serving_gpu]}],
            }
        optional: dict[str, Any] | None = None
        if self.args.model_config:
            import yaml

            optional = {"model": yaml.safe_load(self.args.model_config)}
        self.daemon = Daemon(phase=phase, python=self.args.python, port=self.args.port,
                             interval=self.args.interval, log=self.daemon_log,
                             simulate=self.args.simulate, config=config)
        ok = self.daemon.start(optional=optional)
        self.result["daemon"]["phases"].append(self.daemon.record)
        self.say(f"daemon {phase}: {'ready' if ok else 'FAILED'} "
                 f"{self.daemon.record.get('error', '')}")
        self.save()
        if ok:
            time.sleep(self.args.settle)  # let GPM open its first full window
        return ok

    def stop_daemon(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
            self.save()

    def poll_cost(self) -> None:
        """Daemon CPU over a quiet window (no scrapes, idle GPU): the polling cost alone."""
        d = self.daemon
        if d is None or not d.alive():
            self.result["poll_cost"] = {"error": "daemon not running"}
            return
        before = self._poll_histogram()
        cpu0, t0 = d.cpu(), time.monotonic()
        time.sleep(self.args.quiet)
        cpu1, t1 = d.cpu(), time.monotonic()
        after = self._poll_histogram()
        gpus = int(self.result["gpu"].get("count") or 1)
        if self.args.simulate:
            gpus = 8
        cost: dict[str, Any] = {"quiet_seconds": t1 - t0, "gpus": gpus,
                                "interval_seconds": self.args.interval,
                                "rss": proc_rss_bytes(d.proc.pid) if d.proc else {}}
        if cpu0 is not None and cpu1 is not None:
            cost["cpu_seconds"] = cpu1 - cpu0
            cost["cpu_percent_of_core_per_gpu"] = 100.0 * (cpu1 - cpu0) / (t1 - t0) / gpus
        cost["poll_duration"] = _histogram_delta(before, after)
        self.result["poll_cost"] = cost
        self.say(f"poll cost: {cost.get('cpu_percent_of_core_per_gpu')} % of a core per GPU")
        self.save()

    def _poll_histogram(self) -> dict[str, float]:
        try:
            _, node, _ = self.daemon.scrape("0") if self.daemon else ({}, {}, "")
        except Exception:
            return {}
        return {k: v for k, v in node.items()
                if k.startswith("goodput_exporter_poll_duration_seconds")}

    def run_workload(self, name: str) -> None:
        expected, acceptable, unproductive = EXPECTED[name]
        entry: dict[str, Any] = {
            "description": DESCRIPTIONS.get(name, ""),
            "expected": expected,
            "acceptable": list(acceptable),
            "expect_unproductive": unproductive,
            "gpu": self.target_gpu(name),
            "status": "running",
            "samples": [],
        }
        self.result["workloads"][name] = entry
        self.save()
        self.say(f"workload {name}: start")
        port = self.serving_port
        work: WorkloadProcess | None = None
        try:
            if name not in NO_PROCESS:
                safety = self.args.seconds + self.args.settle + 60
                cmd = workloads.command(name, "--seconds", str(safety), "--port", str(port),
                                        *self.workload_args(), python=self.args.python)
                work = WorkloadProcess(name, cmd, ROOT, child_env(), self.work_log, self.lock)
                timeout = 120.0 if name in SERVING else 60.0
                if not work.wait_ready(timeout):
                    err = (work.event("error") or {}).get("error") or (
                        f"not ready after {timeout:.0f}s (exit {work.proc.poll()})")
                    raise RuntimeError(err)
                entry["info"] = (work.event("ready") or {}).get("info", {})
            self._sample(name, entry, work, port)
            entry["status"] = "ok"
        except Exception as exc:
            entry["status"] = "error"
            entry["error"] = f"{type(exc).__name__}: {exc}"
            self.say(f"workload {name}: ERROR {entry['error']}")
        finally:
            if work is not None:
                entry["exit_code"] = work.stop()
                done = work.event("done")
                if done:
                    entry["stats"] = done.get("stats", {})
                if work.event("error") and "error" not in entry:
                    entry["error"] = (work.event("error") or {}).get("error")
        changes = None
        if "ready_time" in entry:
            self.daemon_log.flush()
            lines = (self.out / "daemon.log").read_text(errors="replace").splitlines()
            changes = regime_changes(lines, entry["gpu"], entry["ready_time"])
            # only the changes up to the end of this workload's sampling
            last = entry["samples"][-1]["t"] + 1 if entry["samples"] else 0
            changes = [c for c in changes if c[0] <= last]
        entry["summary"] = summarize(entry["samples"], expected, acceptable,
                                     drop=self.args.drop, interval=self.args.interval,
                                     changes=changes)
        s = entry["summary"]
        self.say(f"workload {name}: {entry['status']} regime={s['steady_regime']} "
                 f"(expected {expected}) windows_to_regime={s['windows_to_regime']}")
        self.save()

    def _sample(self, name: str, entry: dict[str, Any], work: WorkloadProcess | None,
                port: int) -> None:
        gpu = entry["gpu"]
        d = self.daemon
        cpu0 = d.cpu() if d else None
        t0 = time.monotonic()
        entry["ready_time"] = ((work.event("ready") or {}).get("time") if work is not None
                               else time.time())
        n = round(self.args.seconds / self.args.interval)
        raw_saved = False
        for i in range(n + 1):
            due = t0 + i * self.args.interval
            time.sleep(max(0.0, due - time.monotonic()))
            if work is not None and work.proc.poll() is not None:
                raise RuntimeError(f"workload exited early with {work.proc.returncode}: "
                                   f"{(work.event('error') or {}).get('error', '')}")
            smi = self._smi_start()
            sample: dict[str, Any] = {"t": round(time.monotonic() - t0, 3)}
            if d is not None and d.alive():
                try:
                    device, node, body = d.scrape(gpu)
                    sample["daemon"] = device
                    sample["node"] = {
                        k: v for k, v in node.items()
                        if k.startswith(("goodput_serving", "goodput_exporter_source"))
                    }
                    if not raw_saved and i >= n // 2 and name in ("large_gemm", *SERVING):
                        (self.out / f"metrics-{name}.txt").write_text(body)
                        raw_saved = True
                        if name == "large_gemm":
                            self._save_debug_state()
                except Exception as exc:
                    sample["daemon_error"] = f"{type(exc).__name__}: {exc}"
            if name in SERVING:
                sample["vllm"] = _scrape_vllm(port)
            sample["smi"] = self._smi_finish(smi)
            entry["samples"].append(sample)
            if i % 10 == 0:
                self.save()
        cpu1 = d.cpu() if d else None
        if cpu0 is not None and cpu1 is not None:
            wall = time.monotonic() - t0
            entry["daemon_cpu_percent_with_scrapes"] = 100.0 * (cpu1 - cpu0) / wall

    def _save_debug_state(self) -> None:
        if self.daemon is None:
            return
        with contextlib.suppress(Exception):
            status, body = http_get(self.daemon.base + "/debug/state")
            if status == 200:
                self.result["debug_state_sample"] = json.loads(body)

    def _smi_start(self) -> subprocess.Popen[str] | None:
        if self.args.simulate or shutil.which("nvidia-smi") is None:
            return None
        cmd = ["nvidia-smi", "-i", "0", f"--query-gpu={','.join(SMI_FIELDS)}",
               "--format=csv,noheader,nounits"]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def _smi_finish(self, proc: subprocess.Popen[str] | None) -> dict[str, Any]:
        if proc is None:
            return {}
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            return {"error": "timeout"}
        return parse_smi_csv(out, SMI_FIELDS)

    def support(self) -> None:
        path = self.out / "daemon.log"
        self.daemon_log.flush()
        support = log_support(path.read_text(errors="replace").splitlines())
        families: set[str] = set()
        profiling: dict[str, float] = {}
        for entry in self.result["workloads"].values():
            for s in entry.get("samples", []):
                for key, value in (s.get("daemon") or {}).items():
                    families.add(key.split("{", 1)[0])
                    if key.startswith("goodput_gpu_profiling_available"):
                        profiling[key] = value
        support["families_gpu0"] = sorted(families)
        support["profiling_available"] = profiling
        self.result["support"] = support
        self.save()

    def run(self) -> None:
        args = self.args
        wanted = [w for w in args.workloads.split(",") if w] if args.workloads else list(WORKLOADS)
        unknown = [w for w in wanted if w not in EXPECTED]
        if unknown:
            raise SystemExit(f"unknown workload(s): {', '.join(unknown)}")
        plain = [w for w in wanted if w not in SERVING]
        serving = [w for w in wanted if w in SERVING]
        self.serving_port = free_port()
        if not args.simulate:
            self.gpu_info()
            self.say(f"GPU: {self.result['gpu']}")
        self.save()
        phases: list[tuple[str, list[str], str | None]] = []
        if args.simulate:  # one daemon: the simulated node has a GPU per pattern
            phases.append(("simulated", plain + serving, SIM_GPU["transformer_decode"]))
        else:
            if plain:
                phases.append(("hardware", plain, None))
            if serving:
                phases.append(("serving", serving, "0"))
        restarts = 0
        for i, (phase, names, serving_gpu) in enumerate(phases):
            self.start_daemon(phase, serving_gpu, self.serving_port)
            if i == 0:
                self.poll_cost()
            for name in names:
                need = args.seconds + PHASE_OVERHEAD.get(name, 15.0)
                if self.elapsed() + need > args.budget:
                    self.result["workloads"][name] = {
                        "status": "skipped", "expected": EXPECTED[name][0],
                        "description": DESCRIPTIONS.get(name, ""),
                        "error": f"budget: {self.elapsed():.0f}s used of {args.budget:.0f}s"}
                    self.say(f"workload {name}: skipped (budget)")
                    continue
                if (self.daemon is None or not self.daemon.alive()) and restarts < 2:
                    restarts += 1
                    self.say("daemon is not running: starting it again")
                    self.start_daemon(f"{phase}-restart{restarts}", serving_gpu,
                                      self.serving_port)
                self.run_workload(name)
                time.sleep(1.0)
            if self.daemon is not None and self.daemon.alive():
                self.daemon.record["rss_end"] = proc_rss_bytes(self.daemon.proc.pid)  # type: ignore[union-attr]
            self.stop_daemon()
        self.support()
        self.result["finished"] = runner.now()
        self.result["complete"] = True
        self.result["elapsed_seconds"] = self.elapsed()
        self.save()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_daemon()
        self.result["finished"] = self.result["finished"] or runner.now()
        self.result["elapsed_seconds"] = self.elapsed()
        with contextlib.suppress(Exception):
            self.support()
        self.save()
        self.daemon_log.close()
        self.work_log.close()


def _scrape_vllm(port: int) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    try:
        status, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=1.0)
    except OSError:
        return {}
    if status != 200:
        return {}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name.startswith("vllm:") and not sample.name.endswith("_created"):
                out[sample.name] = float(sample.value)
    return out


def _histogram_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, Any]:
    """Per source: polls and mean duration between two scrapes of the poll histogram."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        match = re.match(r"goodput_exporter_poll_duration_seconds_(sum|count)\{source=(.+)\}$",
                         key)
        if not match:
            continue
        part, source = match.groups()
        row = out.setdefault(source, {})
        row[part] = value - before.get(key, 0.0)
        row[f"{part}_total"] = value
    for row in out.values():
        if row.get("count"):
            row["mean_seconds"] = row.get("sum", 0.0) / row["count"]
    return out


def _host_info() -> dict[str, Any]:
    info: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count(),
                            "hostname": socket.gethostname()}
    try:
        from importlib.metadata import version

        info["nvidia_ml_py"] = version("nvidia-ml-py")
    except Exception:
        info["nvidia_ml_py"] = None
    return info


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "validation-out"),
                   help="output directory (default $OUT)")
    p.add_argument("--seconds", type=float, default=25.0,
                   help="sampling time per workload after it reports ready")
    p.add_argument("--drop", type=float, default=5.0,
                   help="seconds after ready left out of the steady-state medians")
    p.add_argument("--quiet", type=float, default=15.0,
                   help="seconds of unscraped polling for the poll-cost measurement")
    p.add_argument("--settle", type=float, default=3.0,
                   help="seconds after the daemon is ready before measuring")
    p.add_argument("--budget", type=float, default=450.0,
                   help="skip workloads that would end past this many seconds")
    p.add_argument("--interval", type=float, default=1.0, help="daemon poll interval")
    p.add_argument("--port", type=int, default=19433, help="daemon listen port")
    p.add_argument("--workloads", default="",
                   help=f"comma-separated subset of: {','.join(WORKLOADS)}")
    p.add_argument("--model-config",
                   default=f"{{model_parameters: {{{MODEL_NAME}: {DecoderShape().params}}}}}",
                   help="YAML for the daemon's `model:` section (default: the transformer "
                        "workload's parameter count, for MFU); dropped if the daemon "
                        "rejects it")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter for the daemon and workloads")
    p.add_argument("--simulate", action="store_true",
                   help="no GPU: simulated daemon and dry-run workloads (pipeline check)")
    p.add_argument("--workload-args", default="",
                   help="extra arguments for each workload (python -m bench.gpu.workloads "
                        "NAME --help; replaces --dry-run under --simulate; e.g. '--device "
                        "cpu --small' for a CPU smoke run)")
    return p


def _finish(run: Validation) -> None:
    print(summary_table(run.result), flush=True)
    run.say(f"wrote {run.out / 'validation.json'}")


def main(argv: list[str] | None = None) -> int:
    return runner.main(parser(), Validation, _finish, argv)


def summary_table(result: Mapping[str, Any]) -> str:
    """A short plain-text table for the end of the console output."""
    rows = [f"{'workload':26} {'status':8} {'expected':15} {'observed':15} {'win':>4} "
            f"{'util':>5} {'sm':>5} {'tensor':>6} {'dram':>5} flags"]
    for name, entry in result.get("workloads", {}).items():
        s = entry.get("summary") or {}
        d = s.get("daemon_medians") or {}

        def num(key: str, d: Mapping[str, Any] = d) -> str:
            value = d.get(key)
            return "-" if value is None else f"{value:.2f}"

        flags = ",".join(k for k, v in (s.get("busy_unproductive_share") or {}).items() if v > 0.5)
        rows.append(
            f"{name:26} {entry.get('status', '-'):8} {entry.get('expected', '-'):15} "
            f"{s.get('steady_regime') or '-':15} {s.get('windows_to_regime', '-')!s:>4} "
            f"{num('goodput_gpu_utilization_ratio'):>5} {num('goodput_gpu_sm_active_ratio'):>5} "
            f"{num('goodput_gpu_tensor_active_ratio'):>6} "
            f"{num('goodput_gpu_dram_active_ratio'):>5} {flags or '-'}")
    cost = result.get("poll_cost") or {}
    rss = (cost.get("rss") or {}).get("VmRSS")
    rows.append(f"poll cost: {cost.get('cpu_percent_of_core_per_gpu', '-')} % of a core per GPU; "
                f"RSS {rss / 2**20 if rss else '-'} MiB; elapsed "
                f"{result.get('elapsed_seconds', 0):.0f} s")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
