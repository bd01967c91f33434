"""Real-GPU validation: run the daemon next to a panel of known workloads and record what it saw.

One run, standalone, on a machine with an NVIDIA GPU, torch and the exporter's dependencies
(no network needed)::

    PYTHONUNBUFFERED=1 python3 bench/gpu_validation.py --out "$OUT" --seconds 25

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
``bench/report.py`` turns the JSON into docs/validation/*.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from workloads import (  # noqa: E402  (bench/ is not a package)
    DESCRIPTIONS,
    EXPECTED,
    MODEL_NAME,
    NO_PROCESS,
    SERVING,
    WORKLOADS,
    DecoderShape,
)

SCHEMA = 1
SMI_FIELDS = ("utilization.gpu", "utilization.memory", "power.draw", "memory.used", "clocks.sm",
              "temperature.gpu")
SMI_INFO_FIELDS = ("index", "name", "uuid", "driver_version", "pci.bus_id", "memory.total",
                   "power.limit", "clocks.max.sm", "clocks.max.mem", "compute_cap")
# Per-device label names that identify the device rather than the series.
DEVICE_LABELS = frozenset({"gpu", "uuid", "node", "namespace", "pod", "container"})
# Simulated node: which simulated GPU plays each workload's pattern (see exporter/sim).
SIM_GPU = {
    "idle": "0", "allocated_idle": "1", "large_gemm": "2", "hbm_copy": "3",
    "transformer_decode": "3", "small_gemm_sync": "4", "large_kernels_host_sleep": "4",
    "tiny_kernels": "5",
}
PHASE_OVERHEAD = {"transformer_decode": 45.0}  # start-up beyond --seconds, for the budget


# --- pure helpers (unit-tested) ---------------------------------------------------------------

def series_key(name: str, labels: Mapping[str, str]) -> str:
    """``name{a=1,b=2}`` with device-identity labels left out; plain ``name`` if none left."""
    rest = sorted((k, v) for k, v in labels.items() if k not in DEVICE_LABELS)
    if not rest:
        return name
    return name + "{" + ",".join(f"{k}={v}" for k, v in rest) + "}"


def parse_exposition(text: str, gpu: str) -> tuple[dict[str, float], dict[str, float]]:
    """Split a /metrics body into (series of device ``gpu``, node series), keyed by
    :func:`series_key`. Histogram buckets, ``_created`` and info-style series are skipped."""
    from prometheus_client.parser import text_string_to_metric_families

    device: dict[str, float] = {}
    node: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name.endswith(("_bucket", "_created")) or name in (
                "goodput_gpu_info", "goodput_exporter_build_info"
            ):
                continue
            if "gpu" in sample.labels:
                if sample.labels["gpu"] == gpu:
                    device[series_key(name, sample.labels)] = float(sample.value)
            else:
                node[series_key(name, sample.labels)] = float(sample.value)
    return device, node


def active_label(values: Mapping[str, float], family: str, label: str) -> list[str]:
    """Label values of ``family`` series whose value is 1 (a state set such as the regime)."""
    out = []
    prefix = family + "{"
    for key, value in values.items():
        if key.startswith(prefix) and value >= 0.5:
            labels = dict(part.split("=", 1) for part in key[len(prefix):-1].split(","))
            if label in labels:
                out.append(labels[label])
    return sorted(out)


def run_lengths(seq: Iterable[str]) -> list[list[Any]]:
    """``a a b`` -> ``[["a", 2], ["b", 1]]``."""
    out: list[list[Any]] = []
    for item in seq:
        if out and out[-1][0] == item:
            out[-1][1] += 1
        else:
            out.append([item, 1])
    return out


def median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and v == v]
    return statistics.median(vals) if vals else None


def counter_rate(samples: list[dict[str, Any]], section: str, key_prefix: str) -> float | None:
    """Per-second rate of the sum of counters whose key starts with ``key_prefix``."""
    points = []
    for s in samples:
        values = s.get(section) or {}
        matched = [v for k, v in values.items() if k.startswith(key_prefix)]
        if matched:
            points.append((s["t"], sum(matched)))
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def regime_changes(lines: Iterable[str], gpu: str, ready_time: float) -> list[list[Any]]:
    """``[seconds after ready, regime]`` from the daemon's ``regime_changed`` log lines of
    ``gpu``; the last change before the ready moment is kept (clamped to 0) as the regime the
    workload started under."""
    out: list[list[Any]] = []
    before: list[Any] | None = None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("event") != "regime_changed":
            continue
        if str(rec.get("gpu")) != gpu or "timestamp" not in rec:
            continue
        try:
            when = datetime.fromisoformat(str(rec["timestamp"]).replace("Z", "+00:00"))
        except ValueError:
            continue
        rel = when.timestamp() - ready_time
        if rel < 0:
            before = [0.0, rec.get("regime")]
        else:
            out.append([round(rel, 3), rec.get("regime")])
    return ([before] if before else []) + out


def log_windows_to_regime(changes: list[list[Any]], good: set[str], interval: float
                          ) -> int | None:
    """Whole windows from ready until the regime log first says a ``good`` regime."""
    for rel, regime in changes:
        if regime in good:
            return math.ceil(rel / interval - 1e-6) if rel > 0 else 0
    return None


STEADY_SIGNALS = (
    "goodput_gpu_utilization_ratio",
    "goodput_gpu_graphics_active_ratio",
    "goodput_gpu_sm_active_ratio",
    "goodput_gpu_tensor_active_ratio",
    "goodput_gpu_dram_active_ratio",
)


MEMORY_USED = "goodput_gpu_memory_used_bytes"  # compared relatively: allocated-idle's signal


def steady_start(samples: list[dict[str, Any]], medians: Mapping[str, float | None],
                 tolerance: float = 0.05) -> float | None:
    """Time of the first sample from which every profiling signal stays within ``tolerance``
    of its steady-state median: when the workload's own warm-up (weights, cuBLAS
    heuristics, first allocation) is over and the daemon's window covers only the workload."""
    def close(sample: dict[str, Any]) -> bool:
        daemon = sample.get("daemon") or {}
        for key in STEADY_SIGNALS:
            want, got = medians.get(key), daemon.get(key)
            if want is not None and (got is None or abs(got - want) > tolerance):
                return False
        want, got = medians.get(MEMORY_USED), daemon.get(MEMORY_USED)
        return want is None or (got is not None and abs(got - want) <= tolerance * want)

    start = None
    for sample in samples:
        held = close(sample)
        if held and start is None:
            start = sample["t"]
        elif not held:
            start = None  # must hold from here to the end of the run
    return start


def windows_from_steady(changes: list[list[Any]], regimes: list[tuple[float, str]],
                        good: set[str], start: float | None, interval: float) -> int | None:
    """Whole windows from steady state until the daemon first says a ``good`` regime; 0 when
    it already said so (a regime entered during warm-up counts from there)."""
    if start is None:
        return None
    timeline = [(rel, regime) for rel, regime in changes] if changes else regimes
    current = None
    for rel, regime in timeline:
        if rel <= start:
            current = regime
            continue
        if current in good:
            return 0
        if regime in good:
            return max(0, math.ceil((rel - start) / interval - 1e-6))
        current = regime
    return 0 if current in good else None


def summarize(
    samples: list[dict[str, Any]],
    expected: str,
    acceptable: Iterable[str] = (),
    drop: float = 5.0,
    interval: float = 1.0,
    changes: list[list[Any]] | None = None,
) -> dict[str, Any]:
    """Steady-state medians (samples with ``t >= drop``), regime sequence and timing.

    ``windows_to_regime`` counts daemon windows from the workload's ready moment (t=0) to the
    expected (or an acceptable) regime: from the daemon's own ``regime_changed`` log lines when
    given (exact), else from the first 1 s sample showing it (up to one window late).
    ``regime_share`` is the share of steady samples that show it.
    """
    good = {expected, *acceptable}
    steady = [s for s in samples if s["t"] >= drop]
    # A workload whose warm-up outlasts ``drop`` (weights initialised on the GPU, first
    # prefill) would bias the medians and rates: keep only samples from steady state on.
    first_pass = {k: median((s.get("daemon") or {}).get(k) for s in steady)
                  for k in (*STEADY_SIGNALS, MEMORY_USED)}
    start = steady_start(samples, first_pass)
    if start is not None and start > drop:
        steady = [s for s in samples if s["t"] >= start] or steady
    regimes = [(s["t"], (active_label(s.get("daemon") or {}, "goodput_gpu_regime", "regime")
                         or ["none"])[0]) for s in samples]
    first = next((t for t, r in regimes if r in good), None)
    steady_regimes = [r for t, r in regimes if t >= max(drop, start or drop)]
    keys = sorted({k for s in steady for k in (s.get("daemon") or {})})
    smi_keys = sorted({k for s in steady for k in (s.get("smi") or {})})
    flags: dict[str, float] = {}
    for reason in ("hollow_busy", "busy_no_output"):
        key = f"goodput_gpu_busy_unproductive{{reason={reason}}}"
        vals = [s["daemon"][key] for s in steady if key in (s.get("daemon") or {})]
        if vals:
            flags[reason] = sum(1 for v in vals if v >= 0.5) / len(vals)
    daemon_medians = {k: median((s.get("daemon") or {}).get(k) for s in steady) for k in keys}
    return {
        "samples": len(samples),
        "steady_samples": len(steady),
        "steady_start": start,
        "windows_from_steady": windows_from_steady(changes or [], regimes, good, start, interval),
        "daemon_medians": daemon_medians,
        "smi_medians": {k: median((s.get("smi") or {}).get(k) for s in steady)
                        for k in smi_keys},
        "regime_sequence": run_lengths(r for _, r in regimes),
        "steady_regime": (statistics.mode(steady_regimes) if steady_regimes else None),
        "windows_to_regime": (
            log_windows_to_regime(changes, good, interval) if changes
            else None if first is None else max(0, round(first / interval))),
        "windows_to_regime_source": "daemon log" if changes else "samples",
        "regime_changes": changes or [],
        "regime_share": (sum(1 for r in steady_regimes if r in good) / len(steady_regimes)
                         if steady_regimes else None),
        "busy_unproductive_share": flags,
        "tokens_per_second": _gen_rate(steady),
        "engine_tokens_per_second": counter_rate(steady, "vllm", "vllm:generation_tokens_total"),
        "engine_prompt_tokens_per_second": counter_rate(steady, "vllm",
                                                        "vllm:prompt_tokens_total"),
        "energy_watts": counter_rate(steady, "daemon", "goodput_gpu_energy_joules_total"),
    }


def _gen_rate(samples: list[dict[str, Any]]) -> float | None:
    """Generation-token rate from the daemon's attributed counters (kind=generation only)."""
    rows = []
    for s in samples:
        vals = [v for k, v in (s.get("daemon") or {}).items()
                if k.startswith("goodput_gpu_tokens_total{") and "kind=generation" in k]
        if vals:
            rows.append({"t": s["t"], "x": {"gen": sum(vals)}})
    return counter_rate(rows, "x", "gen")


def gpu_kind(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100``; anything else -> a slug of the name."""
    match = re.search(r"\b([A-Z]\d{2,4})\b", name.upper())
    if match:
        return match.group(1).lower()
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def log_support(lines: Iterable[str]) -> dict[str, Any]:
    """What the daemon's JSON log says about support: unsupported NVML readings, unsupported
    GPM metric ids, GPM support per GPU, and every distinct event name seen."""
    nvml: dict[str, set[str]] = {}
    gpm_ids: set[int] = set()
    gpm_support: dict[str, Any] = {}
    events: dict[str, int] = {}
    errors: list[dict[str, Any]] = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        event = str(rec.get("event", ""))
        events[event] = events.get(event, 0) + 1
        if event == "nvml_metric_unsupported":
            nvml.setdefault(str(rec.get("gpu", "")), set()).add(str(rec.get("metric", "")))
        elif event == "gpm_metrics_unsupported":
            gpm_ids.update(int(i) for i in rec.get("metric_ids") or [])
        elif event == "gpm_support":
            gpm_support[str(rec.get("gpu", ""))] = {"supported": rec.get("supported"),
                                                    "reason": rec.get("reason", "")}
        if rec.get("level") in ("error", "critical") and len(errors) < 50:
            errors.append(rec)
    return {
        "nvml_unsupported": {g: sorted(m) for g, m in nvml.items()},
        "gpm_unsupported_ids": sorted(gpm_ids),
        "gpm_support": gpm_support,
        "log_events": events,
        "log_errors": errors,
    }


# --- process and HTTP plumbing ----------------------------------------------------------------

def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` from /proc (Linux), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def proc_rss_bytes(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def run_cmd(cmd: list[str], timeout: float = 20.0) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        return proc.returncode, proc.stdout + proc.stderr
    except FileNotFoundError:
        return 127, f"{cmd[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, f"{cmd[0]}: timed out after {timeout}s"


def parse_smi_csv(text: str, fields: Iterable[str]) -> dict[str, Any]:
    """One ``--format=csv,noheader,nounits`` line to {field: float or str}; N/A dropped."""
    names = list(fields)
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    values = [v.strip() for v in line.split(",")]
    out: dict[str, Any] = {}
    if len(values) != len(names):
        return out
    for name, value in zip(names, values, strict=True):
        if not value or value.startswith(("[N/A]", "N/A", "[Not Supported]")):
            continue
        try:
            out[name] = float(value)
        except ValueError:
            out[name] = value
    return out


# --- the daemon -------------------------------------------------------------------------------

@dataclass
class Daemon:
    """One daemon process (a phase); records start time, readiness and CPU/RSS."""

    phase: str
    python: str
    port: int
    interval: float
    log: IO[str]
    simulate: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, config_path: str | None) -> list[str]:
        cmd = [self.python, "-m", "exporter", "--listen", f"127.0.0.1:{self.port}",
               "--interval", str(self.interval), "--log-format", "json"]
        if self.simulate:
            cmd.append("--simulate")
        if config_path:
            cmd += ["--config", config_path]
        return cmd

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
        import yaml

        if not port_free(self.port):  # someone else's daemon would answer our /readyz
            taken, self.port = self.port, free_port()
            self.log.write(f"# port {taken} is taken; using {self.port}\n")

        path = None
        if config:
            fd, path = tempfile.mkstemp(prefix=f"goodput-{self.phase}-", suffix=".yaml")
            with os.fdopen(fd, "w") as fh:
                yaml.safe_dump(config, fh)
        cmd = self.command(path)
        self.log.write(f"# --- phase {self.phase}: {' '.join(cmd)}\n")
        self.log.flush()
        started = time.monotonic()
        self.record = {"phase": self.phase, "command": cmd, "config": config,
                       "started": time.time()}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=_child_env())
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                self.record.update(exit_code=self.proc.returncode,
                                   error=f"daemon exited with {self.proc.returncode} at start")
                return False
            try:
                status, body = http_get(self.base + "/readyz", timeout=1.0)
            except OSError:
                time.sleep(0.25)
                continue
            if status == 200 or (status == 404 and http_get(self.base + "/metrics")[0] == 200):
                time.sleep(0.3)
                if self.proc.poll() is not None:
                    continue  # answered by another process; ours exited (reported above)
                self.record["ready_seconds"] = time.monotonic() - started
                self.record["port"] = self.port
                return True
            self.record["last_readyz"] = f"{status} {body.strip()[:200]}"
            time.sleep(0.25)
        self.record["error"] = f"not ready after {timeout:.0f}s ({self.record.get('last_readyz')})"
        return self.proc.poll() is None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu(self) -> float | None:
        return proc_cpu_seconds(self.proc.pid) if self.alive() and self.proc else None

    def scrape(self, gpu: str) -> tuple[dict[str, float], dict[str, float], str]:
        status, body = http_get(self.base + "/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        device, node = parse_exposition(body, gpu)
        return device, node, body

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.record["rss"] = proc_rss_bytes(self.proc.pid)
            self.record["cpu_seconds_total"] = proc_cpu_seconds(self.proc.pid)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
                self.record["killed"] = True
        self.record["exit_code"] = self.proc.returncode
        self.record["stopped"] = time.time()


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The repo root first so `python -m exporter` and bench imports resolve from this checkout.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


# --- workloads --------------------------------------------------------------------------------

class Workload:
    """One workload subprocess; collects its JSON events from stdout."""

    def __init__(self, name: str, python: str, seconds: float, port: int,
                 extra_args: list[str], log: IO[str], lock: threading.Lock) -> None:
        self.name = name
        self.events: dict[str, dict[str, Any]] = {}
        self.ready = threading.Event()
        self.log = log
        self.lock = lock
        cmd = [python, str(HERE / "workloads.py"), name, "--seconds", str(seconds),
               "--port", str(port), *extra_args]
        with lock:
            log.write(f"# --- workload {name}: {' '.join(cmd)}\n")
            log.flush()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=log,
                                     text=True, env=_child_env())
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.lock:
                self.log.write(f"[{self.name}] {line}")
                self.log.flush()
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and "event" in rec:
                self.events[rec["event"]] = rec
                if rec["event"] in ("ready", "error"):
                    self.ready.set()
        self.ready.set()

    def wait_ready(self, timeout: float) -> bool:
        self.ready.wait(timeout)
        return "ready" in self.events

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.thread.join(timeout=5)
        return self.proc.returncode


# --- the run ----------------------------------------------------------------------------------

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
            "started": _now(),
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
        work: Workload | None = None
        try:
            if name not in NO_PROCESS:
                safety = self.args.seconds + self.args.settle + 60
                work = Workload(name, self.args.python, safety, port, self.workload_args(),
                                self.work_log, self.lock)
                timeout = 120.0 if name in SERVING else 60.0
                if not work.wait_ready(timeout):
                    err = work.events.get("error", {}).get("error") or (
                        f"not ready after {timeout:.0f}s (exit {work.proc.poll()})")
                    raise RuntimeError(err)
                entry["info"] = work.events["ready"].get("info", {})
            self._sample(name, entry, work, port)
            entry["status"] = "ok"
        except Exception as exc:
            entry["status"] = "error"
            entry["error"] = f"{type(exc).__name__}: {exc}"
            self.say(f"workload {name}: ERROR {entry['error']}")
        finally:
            if work is not None:
                entry["exit_code"] = work.stop()
                done = work.events.get("done")
                if done:
                    entry["stats"] = done.get("stats", {})
                if "error" in work.events and "error" not in entry:
                    entry["error"] = work.events["error"].get("error")
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

    def _sample(self, name: str, entry: dict[str, Any], work: Workload | None, port: int) -> None:
        gpu = entry["gpu"]
        d = self.daemon
        cpu0 = d.cpu() if d else None
        t0 = time.monotonic()
        entry["ready_time"] = (work.events["ready"]["time"] if work is not None
                               else time.time())
        n = round(self.args.seconds / self.args.interval)
        raw_saved = False
        for i in range(n + 1):
            due = t0 + i * self.args.interval
            time.sleep(max(0.0, due - time.monotonic()))
            if work is not None and work.proc.poll() is not None:
                raise RuntimeError(f"workload exited early with {work.proc.returncode}: "
                                   f"{work.events.get('error', {}).get('error', '')}")
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
        self.result["finished"] = _now()
        self.result["complete"] = True
        self.result["elapsed_seconds"] = self.elapsed()
        self.save()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_daemon()
        self.result["finished"] = self.result["finished"] or _now()
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


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "validation-out"),
                        help="output directory (default $OUT)")
    parser.add_argument("--seconds", type=float, default=25.0,
                        help="sampling time per workload after it reports ready")
    parser.add_argument("--drop", type=float, default=5.0,
                        help="seconds after ready left out of the steady-state medians")
    parser.add_argument("--quiet", type=float, default=15.0,
                        help="seconds of unscraped polling for the poll-cost measurement")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds after the daemon is ready before measuring")
    parser.add_argument("--budget", type=float, default=450.0,
                        help="skip workloads that would end past this many seconds")
    parser.add_argument("--interval", type=float, default=1.0, help="daemon poll interval")
    parser.add_argument("--port", type=int, default=19433, help="daemon listen port")
    parser.add_argument("--workloads", default="",
                        help=f"comma-separated subset of: {','.join(WORKLOADS)}")
    parser.add_argument("--model-config",
                        default=f"{{model_parameters: {{{MODEL_NAME}: {DecoderShape().params}}}}}",
                        help="YAML for the daemon's `model:` section (default: the transformer "
                             "workload's parameter count, for MFU); dropped if the daemon "
                             "rejects it")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter for the daemon and workloads")
    parser.add_argument("--simulate", action="store_true",
                        help="no GPU: simulated daemon and dry-run workloads (pipeline check)")
    parser.add_argument("--workload-args", default="",
                        help="extra arguments for bench/workloads.py (replaces --dry-run under "
                             "--simulate; e.g. '--device cpu --small' for a CPU smoke run)")
    args = parser.parse_args(argv)
    run = Validation(args)

    def _terminate(*_: Any) -> None:
        raise KeyboardInterrupt  # unwinds into close(): daemon stopped, JSON saved

    signal.signal(signal.SIGTERM, _terminate)
    try:
        run.run()
    except KeyboardInterrupt:
        run.say("interrupted")
    finally:
        run.close()
    print(summary_table(run.result), flush=True)
    run.say(f"wrote {run.out / 'validation.json'}")
    return 0


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
