"""[shared-gpu] validation (issue 50): several processes on one GPU, each timing its own
kernels (bench/gpu/workloads/shared.py), beside the exporter's per-holder figures.

Scenarios (``--scenario``), each one daemon on real NVML and GPM scraping GPU 0 every second:

- ``timeslice``: a GEMM loop, a tiny-kernel loop and a process that holds 8 GiB and idles,
  time-sliced by the driver (no MPS). Calibration: the GEMM alone, then the tiny loop alone,
  then all three together for ``--seconds``.
- ``mps``: the GEMM and tiny loops under an MPS control daemon the caller started (the
  clients inherit ``CUDA_MPS_PIPE_DIRECTORY``), same phases, no idle process.
- ``llama``: a running llama-server (``--llama-url``; the daemon attributes it by process)
  under load from clients that count the tokens they receive, beside a GEMM loop.

Writes ``<out>/<scenario>.json``: every scrape's holder and GPU series, every workload's
calibration and per-second lines, client token counts, and a summary per holder.

    python3 -m bench.gpu.shared_gpu --scenario timeslice --out /tmp/sg --seconds 25
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from testkit.harness import REPO, DaemonProcess

HOLDER_SERIES = (
    "goodput_gpu_holder_kernel_time_ratio",
    "goodput_gpu_holder_sm_active_ratio",
    "goodput_gpu_holder_regime",
    "goodput_gpu_holder_busy_unproductive",
    "goodput_gpu_holder_tokens_per_second",
    "goodput_gpu_holder_tokens_per_kernel_second",
    "goodput_gpu_holder_memory_used_bytes",
    "goodput_gpu_holder_energy_joules_total",
)
GPU_SERIES = (
    "goodput_gpu_utilization_ratio",
    "goodput_gpu_graphics_active_ratio",
    "goodput_gpu_sm_active_ratio",
    "goodput_gpu_regime",
    "goodput_gpu_tokens_total",
)


def scrape(url: str) -> dict[str, Any]:
    text = urllib.request.urlopen(url + "/metrics", timeout=3).read().decode()
    rows: list[list[Any]] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            wanted = s.name in HOLDER_SERIES or s.name in GPU_SERIES
            if wanted and s.labels.get("gpu", "0") == "0":
                rows.append([s.name, dict(s.labels), s.value])
    return {"t": time.time(), "series": rows}


def start_workload(mode: str, out: Path, calib_at: float, go: float, stop: float,
                   env: dict[str, str], dry: bool = False) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "bench.gpu.workloads.shared", "--mode", mode,
           "--out", str(out), "--calib-at", str(calib_at), "--calib-seconds", "3",
           "--go", str(go), "--stop", str(stop), *(["--dry"] if dry else [])]
    return subprocess.Popen(cmd, cwd=REPO, env=env)


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Clients:
    """Threads sending complete /completion requests; counts the tokens each answer says
    it predicted (``timings.predicted_n``, else ``tokens_predicted``)."""

    def __init__(self, url: str, n: int, n_predict: int) -> None:
        self.url, self.n, self.n_predict = url.rstrip("/"), n, n_predict
        self.stop_at = 0.0
        self.done: list[tuple[float, float, int]] = []
        self._lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def run(self, until: float) -> None:
        self.stop_at = until
        self.threads = [threading.Thread(target=self._loop, args=(i,)) for i in range(self.n)]
        for t in self.threads:
            t.start()

    def _loop(self, i: int) -> None:
        k = 0
        while time.time() < self.stop_at:
            body = json.dumps({"prompt": f"client {i} request {k}: tell a long story",
                               "n_predict": self.n_predict, "ignore_eos": True,
                               "cache_prompt": False}).encode()
            began = time.time()
            try:
                req = urllib.request.Request(self.url + "/completion", data=body,
                                             headers={"Content-Type": "application/json"})
                answer = json.loads(urllib.request.urlopen(req, timeout=60).read())
            except Exception:
                time.sleep(0.2)  # the server is busy or restarting: no tight loop
                continue
            n = int((answer.get("timings") or {}).get("predicted_n")
                    or answer.get("tokens_predicted") or 0)
            with self._lock:
                self.done.append((began, time.time(), n))
            k += 1

    def join(self) -> None:
        for t in self.threads:
            t.join(timeout=90)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", choices=("timeslice", "mps", "llama"), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=25.0)
    p.add_argument("--llama-url", default="http://127.0.0.1:8080")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--n-predict", type=int, default=256)
    p.add_argument("--simulate", action="store_true",
                   help="no GPU: the simulated node and dry workloads (plumbing only)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / f"{args.scenario}-work"
    work.mkdir(exist_ok=True)
    log = out / f"{args.scenario}-daemon.log"
    config: dict[str, Any] = {"devices": ["0"], "extended_metrics": True}
    if args.scenario == "llama":
        config["serving"] = {"interval": 1.0, "targets": [
            {"url": args.llama_url.rstrip("/") + "/metrics"}]}
    daemon = DaemonProcess("--interval", "1", *(["--simulate"] if args.simulate else []),
                           log=log, config=config)
    daemon.start(timeout=60, ready_path="/readyz")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "PYTHONUNBUFFERED": "1"}
    now = time.time()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    # The GEMM alone, then the tiny loop alone, then together (the stagger pods show too).
    gemm_at = now + 12.0  # torch import, CUDA context and 8 GiB take a few seconds first
    tiny_at = gemm_at + 4.0  # llama: the server alone under its clients from here
    go = tiny_at + 4.0
    stop = go + args.seconds
    if args.scenario == "timeslice":
        procs["idle"] = start_workload("idle", work / "idle.jsonl", 0, go, stop, env,
                                       args.simulate)
    procs["gemm"] = start_workload("gemm", work / "gemm.jsonl", gemm_at, go, stop, env,
                                   args.simulate)
    if args.scenario != "llama":
        procs["tiny"] = start_workload("tiny", work / "tiny.jsonl", tiny_at, go, stop, env,
                                       args.simulate)
    clients = None
    if args.scenario == "llama":
        clients = Clients(args.llama_url, args.clients, args.n_predict)
        threading.Timer(max(tiny_at - time.time(), 0.0), clients.run, (stop,)).start()
    scrapes: list[dict[str, Any]] = []
    raw = RawSamples(not args.simulate)
    while time.time() < stop + 2.0:
        try:
            scrapes.append(scrape(daemon.url))
        except Exception as exc:  # a missed scrape is a gap in the record, not a failure
            scrapes.append({"t": time.time(), "error": str(exc)})
        raw.read()
        time.sleep(max(0.0, 1.0 - (time.time() % 1.0)))
    state: Any = None
    try:
        state = json.loads(urllib.request.urlopen(daemon.url + "/debug/state", timeout=5).read())
    except Exception as exc:
        state = {"error": str(exc)}
    if clients is not None:
        clients.join()
    for proc in procs.values():
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    daemon.stop()
    result = {
        "scenario": args.scenario,
        "phases": {"gemm_alone": gemm_at, "tiny_alone": tiny_at, "go": go, "stop": stop},
        "workloads": {name: read_lines(work / f"{name}.jsonl") for name in procs},
        "pids": {name: proc.pid for name, proc in procs.items()},
        "scrapes": scrapes,
        "clients": clients.done if clients else [],
        "nvml_state": _nvml_state(state),
        "raw_samples": raw.rows,
    }
    (out / f"{args.scenario}.json").write_text(json.dumps(result))
    print(json.dumps(summary(result), indent=1))
    return 0


class RawSamples:
    """NVML's per-process samples of GPU 0 as the driver returns them, read here beside the
    daemon (its own timestamp), so the report shows what the exporter's input looked like."""

    def __init__(self, on: bool) -> None:
        self.rows: list[list[Any]] = []
        self.last = 0
        self.handle: Any = None
        self.nvml: Any = None
        if on:
            try:
                import pynvml

                pynvml.nvmlInit()
                self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
            except Exception as exc:
                self.rows.append(["error", str(exc)])

    def read(self) -> None:
        if self.handle is None:
            return
        nvml = self.nvml
        try:
            samples = nvml.nvmlDeviceGetProcessesUtilizationInfo(self.handle, self.last)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) != nvml.NVML_ERROR_NOT_FOUND:
                self.rows.append([time.time(), "error", str(exc)])
            return
        for s in samples:
            self.rows.append([time.time(), int(s.pid), int(s.timeStamp), int(s.smUtil),
                              int(s.memUtil)])
            self.last = max(self.last, int(s.timeStamp))


def _nvml_state(state: Any) -> Any:
    """The last NVML poll's per-process samples and processes of GPU 0 (the raw input)."""
    try:
        gpus = state["sources"]["nvml"]["gpus"]["0"]
        return {"process_activity": gpus.get("process_activity"),
                "processes": gpus.get("processes")}
    except (KeyError, TypeError):
        return state


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """Per process over the shared phase (its first 5 s skipped): own share against the
    exporter's share, SM activity and regime (bench/gpu/shared_report.py tabulates it)."""
    from bench.gpu.shared_report import summarize

    return summarize(result)


if __name__ == "__main__":
    sys.exit(main())
