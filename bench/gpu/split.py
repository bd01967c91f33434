"""[split] validation (issue 46): where a job's GPU time goes, part by part, on real GPUs.

Every row is a job whose ranks time each part of their own time with CUDA events
(``bench/gpu/workloads/split.py`` and the [jobs] workloads of ``workloads/jobs.py``); the
exporter's split is the rate of ``goodput_gpu_job_seconds_total{part}`` over the row's
steady windows. A row PASSes when, on every GPU, every part (working, transferring,
waiting, host_stalled, idle) is within TOLERANCE of the ranks' truth and the exporter's
parts sum to 1 within SUM_TOLERANCE.

Rows run packed: a *slot* starts several jobs at once on GPUs of their own (a 2-GPU job on
GPUs 0,1 beside another on 2,3, or one-GPU loads), each in its own process session, so one
daemon (process-session identities) judges them side by side. One command::

    PYTHONUNBUFFERED=1 python3 -m bench.gpu.split --out "$OUT" --plan explore

Besides the daemon's /metrics (scraped every second), the bench reads NVML's own
utilization samples (``nvmlDeviceGetSamples``) for every GPU, so each window carries the
raw readings the model reasons with. ``split_bursty`` rows also check the published
utilization against the rank's kernel time, per poll window and over the row.

NCCL collectives, both sides: every window carries each GPU's ``collectives`` (the
per-second increase of ``goodput_gpu_collectives_total``, NCCL's RAS count, since the last
scrape; the daemon asks RAS every ``--nccl-interval`` seconds, split_run.sh passes 1), and
each rank counts the collectives it launches (``workloads/counted.py``), so the truth has
``collectives_per_second`` beside the split. Writes ``split.json`` (truth, verdicts, every
window) and ``split.md`` (the split, then the collectives by the ranks and by the exporter).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.gpu.jobs import BEFORE, LOST_ROWS, SKIP, scrape
from bench.gpu.jobs import ROWS as JOB_ROWS
from bench.gpu.workloads.core import NO_MULTICAST, command
from bench.gpu.workloads.process import WorkloadProcess
from testkit.harness import REPO, DaemonProcess, child_env, http_get

PARTS = ("working", "transferring", "waiting", "host_stalled", "idle")
TOLERANCE = 0.05
SUM_TOLERANCE = 0.02
UTIL_MEAN_TOLERANCE = 0.03
UTIL_WINDOW_TOLERANCE = 0.1

SHAPES = (("bf16", 1024, 64), ("bf16", 2048, 32), ("bf16", 3072, 16), ("bf16", 4096, 8),
          ("bf16", 6144, 4), ("bf16", 8192, 4), ("fp16", 6144, 4), ("fp32", 1024, 16),
          ("fp32", 2048, 8), ("fp32", 4096, 2), ("fp32", 8192, 1))
"""Kernel shapes of the shape rows: (precision, square GEMM size, GEMMs a step when alone)."""

# row -> (workload, options, GPUs it needs)
ROWS: dict[str, tuple[str, list[str], int]] = {
    # the four shapes
    "checkpoint": ("split_job", ["--ckpt-every-s", "4", "--ckpt-mib", "1024",
                                 "--ckpt-host-s", "1.0"], 2),
    "jitter": ("split_job", ["--jitter-ms", "200"], 2),
    "tp_decode": ("split_job", ["--gemm-n", "4096", "--gemms", "1", "--rounds", "8",
                                "--coll", "all_reduce", "--coll-kib", "256"], 2),
    "tiny_sync": ("split_job", ["--gemm-n", "4096", "--gemms", "8", "--coll", "tiny"], 2),
    # of this bench's design, never fitted on
    "fp32_allgather": ("split_job", ["--dtype", "fp32", "--gemm-n", "4096", "--gemms", "2",
                                     "--coll", "all_gather", "--coll-kib", "32768",
                                     "--heavy", "static", "--extra", "0.15"], 2),
    "fp16_reduce_scatter": ("split_job", ["--dtype", "fp16", "--gemm-n", "6144", "--gemms", "6",
                                          "--coll", "reduce_scatter", "--coll-kib", "65536",
                                          "--heavy", "rotating", "--extra", "0.5"], 2),
    "broadcast_skew": ("split_job", ["--gemm-n", "3072", "--gemms", "24", "--coll", "broadcast",
                                     "--coll-kib", "16384", "--heavy", "static",
                                     "--heavy-rank", "0", "--extra", "0.3"], 2),
    "sendrecv_membound": ("split_job", ["--mem-mib", "2048", "--gemms", "6",
                                        "--coll", "sendrecv", "--coll-kib", "65536"], 2),
    "h2d_loader": ("split_job", ["--h2d-mib", "512", "--gemms", "8", "--coll", "all_reduce",
                                 "--coll-kib", "131072"], 2),
    # one GPU
    "solo_small": ("split_solo", ["--gemm-n", "4096", "--gemms", "8"], 1),
    "solo_checkpoint": ("split_solo", ["--ckpt-every-s", "4", "--ckpt-mib", "1024",
                                       "--ckpt-host-s", "1.0"], 1),
    "bursty": ("split_bursty", [], 1),
    # the [lost] report's rows (bench/gpu/jobs.py), on as many GPUs as the plan gives them
    **{f"lost_{name}": (workload, opts, 4) for name, (workload, opts) in JOB_ROWS.items()},
    # kernel shapes: each GEMM size and precision alone on one GPU (no collective at all: the
    # kernels' own hollowness) and as a tensor-parallel decode (8 x (one GEMM, a 256 KB
    # all-reduce) a step, on two GPUs)
    **{f"shape_solo_{d}_{n}": ("split_solo", ["--dtype", d, "--gemm-n", str(n),
                                              "--gemms", str(k)], 1)
       for d, n, k in SHAPES},
    "shape_solo_membound": ("split_solo", ["--mem-mib", "2048", "--gemms", "6"], 1),
    **{f"shape_tp_{d}_{n}": ("split_job", ["--dtype", d, "--gemm-n", str(n), "--gemms", "1",
                                           "--rounds", "8", "--coll", "all_reduce",
                                           "--coll-kib", "256"], 2)
       for d, n, _k in SHAPES},
}
PLANS: dict[str, list[list[tuple[str, str]]]] = {
    # each slot: (row, GPUs) run at once
    "explore": [
        [("checkpoint", "0,1"), ("jitter", "2,3")],
        [("tp_decode", "0,1"), ("tiny_sync", "2,3")],
        [("fp32_allgather", "0,1"), ("fp16_reduce_scatter", "2,3")],
        [("broadcast_skew", "0,1"), ("sendrecv_membound", "2,3")],
        [("h2d_loader", "0,1"), ("bursty", "2"), ("solo_small", "3")],
    ],
    "final": [
        [("checkpoint", "0,1"), ("jitter", "2,3")],
        [("tp_decode", "0,1"), ("tiny_sync", "2,3")],
        [("fp32_allgather", "0,1"), ("fp16_reduce_scatter", "2,3")],
        [("broadcast_skew", "0,1"), ("sendrecv_membound", "2,3")],
        [("h2d_loader", "0,1"), ("bursty", "2"), ("solo_small", "3")],
        [("lost_rotating", "0,1"), ("lost_pipeline_gpipe", "2,3")],
        [("lost_straggler_10pct", "0,1"), ("lost_host_stall", "2,3")],
        [("lost_late_joiner", "0,1"), ("lost_balanced", "2,3")],
        [("lost_comm_heavy", "0,1"), ("lost_back_to_back", "2,3")],
    ],
    # kernel shapes and the [lost] rows on four GPUs: data for the model's own hollowness
    "data": [
        [("shape_solo_bf16_1024", "0"), ("shape_solo_bf16_2048", "1"),
         ("shape_solo_bf16_3072", "2"), ("shape_solo_bf16_4096", "3")],
        [("shape_solo_bf16_6144", "0"), ("shape_solo_bf16_8192", "1"),
         ("shape_solo_fp16_6144", "2"), ("shape_solo_membound", "3")],
        [("shape_solo_fp32_1024", "0"), ("shape_solo_fp32_2048", "1"),
         ("shape_solo_fp32_4096", "2"), ("shape_solo_fp32_8192", "3")],
        [("shape_tp_bf16_1024", "0,1"), ("shape_tp_bf16_2048", "2,3")],
        [("shape_tp_bf16_3072", "0,1"), ("shape_tp_bf16_8192", "2,3")],
        [("shape_tp_fp32_2048", "0,1"), ("shape_tp_fp32_4096", "2,3")],
        *([(f"lost_{name}", "0,1,2,3")] for name in LOST_ROWS),
    ],
    # the launch-bound shapes again with the kernels-alone truth, and the rows it touches
    "data2": [
        [("shape_solo_bf16_1024", "0"), ("shape_solo_bf16_2048", "1"),
         ("shape_solo_bf16_3072", "2"), ("shape_solo_bf16_4096", "3")],
        [("shape_tp_bf16_1024", "0,1"), ("shape_tp_bf16_2048", "2,3")],
        [("tp_decode", "0,1"), ("shape_tp_bf16_3072", "2,3")],
        [("broadcast_skew", "0,1"), ("tiny_sync", "2,3")],
        [("lost_comm_heavy", "0,1,2,3")],
    ],
    # the final run in two device calls: (a) beside llama-server on GPUs 0,1 first
    # (split_run.sh SERVING_BG=1), then the shapes, this bench's and the kernel shapes;
    # (b) the [lost] rows on four GPUs
    "final_a": [
        [("bursty", "2"), ("solo_small", "3")],
        [("checkpoint", "0,1"), ("jitter", "2,3")],
        [("tp_decode", "0,1"), ("tiny_sync", "2,3")],
        [("fp32_allgather", "0,1"), ("fp16_reduce_scatter", "2,3")],
        [("broadcast_skew", "0,1"), ("sendrecv_membound", "2,3")],
        [("h2d_loader", "0,1"), ("shape_tp_bf16_8192", "2,3")],
        [("shape_tp_bf16_1024", "0,1"), ("shape_tp_bf16_2048", "2,3")],
        [("shape_tp_bf16_3072", "0,1"), ("shape_tp_fp32_2048", "2,3")],
    ],
    "final_b": [
        *([(f"lost_{name}", "0,1,2,3")] for name in LOST_ROWS),
        [("shape_tp_fp32_4096", "0,1"), ("shape_solo_bf16_1024", "2"),
         ("shape_solo_bf16_8192", "3")],
    ],
    # beside llama-server on GPUs 0,1 (split_run.sh SERVING_BG=1): rows re-measured
    "side": [  # the first slot beside llama-server on GPUs 0,1 (split_run.sh SERVING_BG=1)
        [("bursty", "2"), ("solo_small", "3")],
        [("tp_decode", "0,1"), ("tiny_sync", "2,3")],
    ],
}
PLANS["final_c"] = PLANS["final_a"][1:]
"""final_a without its first slot (the bursty minute and solo_small beside llama-server,
validated already): the issue's shapes, this bench's and the kernel shapes, 7 slots; about
245 s at STEADY=15 SKIP=4 (``--estimate``; call A, these plus that slot, took 330 s)."""
PLANS["final_d"] = PLANS["final_b"]
"""final_b's rows: the [lost] rows on four GPUs, then shape_tp_fp32_4096 and two solo
shapes, 9 slots; about 320 s at STEADY=15 SKIP=4 (call B, the same plan, took 319 s)."""
PAIR_ROWS = ("tp_decode", "shape_tp_bf16_3072", "shape_tp_bf16_2048", "shape_tp_bf16_1024",
             "tiny_sync", "checkpoint", "jitter", "shape_tp_bf16_8192", "shape_tp_fp32_2048",
             "fp32_allgather", "fp16_reduce_scatter", "broadcast_skew", "sendrecv_membound",
             "h2d_loader")
PLANS["pair_c"] = [[(row, "0,1")] for row in PAIR_ROWS]
"""final_c's 2-GPU rows one at a time on GPUs 0,1, for a machine of two GPUs (the failing
decode steps first): about 470 s at STEADY=15 SKIP=4 (split_run.sh LIMIT=560)."""
PLANS["pair_d"] = [*([(f"lost_{name}", "0,1")] for name in LOST_ROWS),
                   [("shape_tp_fp32_4096", "0,1")]]
"""final_d's job rows on two GPUs: the [lost] rows as 2-GPU jobs (as lost-h200.md first ran
them), then the FP32 4096-square decode step; about 320 s at STEADY=15 SKIP=4."""
SLOT_SECONDS = 13.0
"""A slot's time besides its skip and steady seconds (ranks spawned, NCCL joined, warm-up,
the transfer timed alone, stop): 31-33 s a slot at STEADY=15 SKIP=4 in the final run's calls
(tests/fixtures/jobs/h200-split2-final-{a,b}-windows.json)."""
CALL_SECONDS = 20.0
"""A device call's time besides its slots (wheels installed, daemon started and stopped)."""


def plan_seconds(plan: str, steady: float = 15.0, skip: float = 4.0) -> float:
    """A plan's estimated wall time on the device machine (no serving beside it, no bursty
    minute): final_c ~245 s and final_d ~320 s at STEADY=15 SKIP=4 (call B, final_d's rows,
    took 319 s; call A, final_c's plus the minute beside llama-server, 330 s)."""
    slots = PLANS[plan]
    before = sum(min(BEFORE[r.removeprefix("lost_")][2], BEFORE_SECONDS)
                 for slot in slots for r, _g in slot if r.removeprefix("lost_") in BEFORE)
    return CALL_SECONDS + len(slots) * (steady + skip + SLOT_SECONDS) + before


MINUTE_ROWS = ("bursty",)
"""Rows that run at least a minute steady in any plan (the issue's utilization criterion is
averaged over a minute); with ``--bursty-minute``."""
BEFORE_SECONDS = 10.0
"""How long the job before a back-to-back row runs here (20 s in the [lost] run)."""
SEEN_SKIP = {f"lost_{k}": v for k, v in SKIP.items()}
"""Rows judged from the start (the late joiner's first seconds are the point)."""


# --- what the model sees: /metrics every second, NVML's samples ---------------------------

def scrape_more(text: str) -> dict[str, Any]:
    """jobs.scrape plus what the split needs: FP pipes, occupancy, processes, the NVML
    source's last poll time and each GPU's link peaks."""
    from prometheus_client.parser import text_string_to_metric_families

    out = scrape(text)
    gpus = out["gpus"]
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            gpu = s.labels.get("gpu")
            if s.name == "goodput_gpu_pipe_active_ratio" and gpu is not None:
                gpus.setdefault(gpu, {})[s.labels.get("pipe", "?")] = s.value
            elif s.name == "goodput_gpu_sm_occupancy_ratio" and gpu is not None:
                gpus.setdefault(gpu, {})["sm_occupancy"] = s.value
            elif s.name == "goodput_gpu_processes" and gpu is not None:
                gpus.setdefault(gpu, {})["processes"] = s.value
            elif s.name == "goodput_gpu_collectives_total" and gpu is not None:
                gpus.setdefault(gpu, {})["collectives_total"] = s.value
            elif s.name in ("goodput_nccl_ras_answered", "goodput_nccl_communicators"):
                out[s.name.removeprefix("goodput_")] = s.value
            elif (s.name == "goodput_exporter_last_success_timestamp_seconds"
                  and s.labels.get("source") == "nvml"):
                out["poll_unix"] = s.value
    return out


def counter_rate(before: float | None, t_before: float, now: float | None, t_now: float
                 ) -> float | None:
    """Per-second increase of a counter between two scrapes; a decrease is a reset (the new
    value is the increase, as Prometheus's rate() takes it); None when either scrape lacks
    the series (no rate from one point) or no time passed."""
    if before is None or now is None or t_now <= t_before:
        return None
    return (now - before if now >= before else now) / (t_now - t_before)


def add_rates(prev: Mapping[str, Any] | None, window: dict[str, Any]) -> None:
    """Each GPU's ``collectives`` in ``window``: the per-second increase of
    goodput_gpu_collectives_total{gpu} since the previous scrape (None without the series)."""
    for gpu, x in window["gpus"].items():
        old = (prev or {}).get("gpus", {}).get(gpu, {})
        x["collectives"] = counter_rate(old.get("collectives_total"),
                                        (prev or {}).get("t_unix", 0.0),
                                        x.get("collectives_total"), window["t_unix"])


class Watch(threading.Thread):
    """Scrapes the daemon every second into ``windows`` until stopped."""

    def __init__(self, daemon: DaemonProcess) -> None:
        super().__init__(daemon=True)
        self.d = daemon
        self.windows: list[dict[str, Any]] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        while not self.stop_flag.wait(1.0 - time.time() % 1.0 + 0.3):
            try:
                status, body = http_get(self.d.url + "/metrics", timeout=2)
            except OSError:
                continue
            if status == 200:
                window = {"t_unix": time.time(), **scrape_more(body)}
                add_rates(self.windows[-1] if self.windows else None, window)
                self.windows.append(window)


class Sampler(threading.Thread):
    """NVML's utilization samples of every GPU (``nvmlDeviceGetSamples``), read every 0.5 s
    since the last one seen: (unix seconds, 0..1) per GPU."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: dict[str, list[tuple[float, float]]] = {}
        self.stop_flag = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            self.error = str(exc)
            return
        try:
            pynvml.nvmlInit()
            handles = {str(i): pynvml.nvmlDeviceGetHandleByIndex(i)
                       for i in range(pynvml.nvmlDeviceGetCount())}
            last = dict.fromkeys(handles, 0)
            while not self.stop_flag.wait(0.5):
                for gpu, h in handles.items():
                    try:
                        _kind, rows = pynvml.nvmlDeviceGetSamples(
                            h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, last[gpu])
                    except pynvml.NVMLError as exc:
                        if "Not Found" not in str(exc):
                            self.error = str(exc)
                        continue
                    keep = self.samples.setdefault(gpu, [])
                    for r in rows:
                        if r.timeStamp > last[gpu]:
                            keep.append((r.timeStamp / 1e6, r.sampleValue.uiVal / 100.0))
                    if rows:
                        last[gpu] = max(last[gpu], max(r.timeStamp for r in rows))
            pynvml.nvmlShutdown()
        except Exception as exc:  # the bench goes on without raw samples, saying why
            self.error = f"{type(exc).__name__}: {exc}"


# --- the truth -----------------------------------------------------------------------------

def parts(first: Mapping[str, Any], last: Mapping[str, Any]) -> dict[str, float]:
    """A rank's split between two of its cumulative truth lines (see workloads/split.py):
    each phase's event time less its launch gaps (workloads/resident.py: the GPU had reached
    the phase but the host had not launched into it; compute also no more than its units'
    kernel time alone, ``kernel_alone_s``), then working = compute, transferring
    = the collectives alone (timed with the GPU queued ahead) + copies, waiting = comm
    beyond the collectives alone, host_stalled = the rest of the wall time (the gaps
    included), idle = 0. ``ev_*``: the same from the event times alone."""
    wall = float(last["wall_s"] - first["wall_s"])

    def share(key: str) -> float:
        return float(last.get(key, 0.0) - first.get(key, 0.0)) / wall

    d = {k: share(f"{k}_s") for k in ("compute", "comm", "copy", "stall")}
    gap = {k: min(share(f"gap_{k}_s"), d[k]) for k in ("compute", "comm", "copy")}
    if "kernel_alone_s" in last:  # the GPU idled between kernels the host launched too slowly
        alone = share("kernel_alone_s")
        gap["compute"] = max(gap["compute"], d["compute"] - alone)
    steps = (last["steps"] - first["steps"]) / wall
    per_step = last.get("pure_comm_per_step_s") or 0.0

    def split(less: Mapping[str, float]) -> dict[str, float]:
        work, comm, copy = (d[k] - less[k] for k in ("compute", "comm", "copy"))
        pure = min(per_step * steps, comm)
        return {"working": work, "transferring": pure + copy, "waiting": comm - pure,
                "host_stalled": max(1.0 - work - comm - copy, 0.0), "idle": 0.0}

    out = split(gap)
    out.update({f"ev_{k}": v for k, v in split(dict.fromkeys(gap, 0.0)).items()})
    out.update({f"raw_{k}": v for k, v in d.items()})
    out.update({f"gap_{k}": v for k, v in gap.items()})
    out["pure_comm"] = min(per_step * steps, d["comm"] - gap["comm"])
    if last.get("pure_host_per_step_s") is not None:
        out["pure_comm_host_launched"] = last["pure_host_per_step_s"] * steps
    out["steps_per_second"] = steps
    out.update(collective_rates(first, last))
    return {k: round(v, 4) for k, v in out.items()}


def collective_rates(first: Mapping[str, Any], last: Mapping[str, Any]) -> dict[str, float]:
    """NCCL collectives the rank launched per second between two truth lines, counted at
    each launch (workloads/counted.py), over the real seconds between them (``clock_s``: NCCL
    counts in wall time, the truth's ``wall_s`` leaves the kernels-alone timings out):
    ``collectives_per_second`` all of them, as NCCL's RAS count sees them,
    ``step_collectives_per_second`` the steps' own (the stop flag's included; the timings
    between steps not). Empty for lines without counts (one GPU, the bursty load)."""
    if "collectives" not in last or "collectives" not in first:
        return {}
    clock = float(last["clock_s"] - first["clock_s"])
    if clock <= 0:
        return {}
    return {"collectives_per_second": (last["collectives"] - first["collectives"]) / clock,
            "step_collectives_per_second":
                (last["step_collectives"] - first["step_collectives"]) / clock}


def truth(events: Sequence[Mapping[str, Any]], start: float, gpus: Sequence[str]
          ) -> dict[str, dict[str, float]]:
    """gpu -> the truth between each rank's first truth line from ``start`` on and its last
    (rank r runs on the r-th of ``gpus``)."""
    by_rank: dict[int, list[Mapping[str, Any]]] = {}
    for e in events:
        if e.get("event") == "truth" and e.get("time", 0.0) >= start:
            by_rank.setdefault(int(e["rank"]), []).append(e)
    out = {}
    for rank, evs in sorted(by_rank.items()):
        if len(evs) >= 2 and rank < len(gpus) and evs[-1]["wall_s"] > evs[0]["wall_s"]:
            out[gpus[rank]] = parts(evs[0], evs[-1])
    return out


def busy_between(bursts: Sequence[tuple[float, float]], t0: float, t1: float) -> float:
    """Share of [t0, t1) that a burst's kernels were resident."""
    if t1 <= t0:
        return 0.0
    return sum(max(min(e, t1) - max(s, t0), 0.0) for s, e in bursts) / (t1 - t0)


# --- one row, one slot -----------------------------------------------------------------------

class Row(threading.Thread):
    """One row's job on its GPUs: (the job before it,) start, steady seconds, stop."""

    def __init__(self, name: str, gpus: str, args: argparse.Namespace, log: Any,
                 lock: threading.Lock, job_id: int) -> None:
        super().__init__(daemon=True)
        self.name_, self.gpus = name, gpus.split(",")
        self.args, self.log, self.lock, self.job_id = args, log, lock, job_id
        self.result: dict[str, Any] = {"gpus": self.gpus}
        self.ready_at: float | None = None
        self.ended_at: float | None = None
        self.proc: WorkloadProcess | None = None

    def env(self) -> dict[str, str]:
        return child_env({**NO_MULTICAST, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                          "CUDA_VISIBLE_DEVICES": ",".join(self.gpus),
                          "SLURM_JOB_ID": str(self.job_id),
                          "SLURM_JOB_NAME": f"split-{self.name_}"})

    def start_job(self, name: str, workload: str, opts: list[str], seconds: float
                  ) -> WorkloadProcess:
        extra = ["--dry-run"] if self.args.simulate else []
        cmd = command(workload, "--seconds", str(seconds), *opts, *extra)
        return WorkloadProcess(name, cmd, REPO, self.env(), self.log, self.lock)

    def run(self) -> None:
        workload, opts, _n = ROWS[self.name_]
        skip = SEEN_SKIP.get(self.name_, self.args.skip)
        self.result.update(workload=workload, options=opts, skip=skip)
        before = BEFORE.get(self.name_.removeprefix("lost_"))
        if before:
            seconds = min(before[2], BEFORE_SECONDS)
            b = self.start_job(f"{self.name_}-before", before[0], before[1], seconds + 60)
            try:
                if b.wait_ready(self.args.ready_timeout):
                    time.sleep(seconds)
            finally:
                b.stop()
        steady = self.args.seconds
        if self.args.bursty_minute and self.name_ in MINUTE_ROWS:
            steady = max(steady, 60.0)
        self.proc = self.start_job(self.name_, workload, opts, steady + skip + 60)
        try:
            if not self.proc.wait_ready(self.args.ready_timeout):
                self.result["error"] = (self.proc.event("error") or {}).get("error", "no ready")
                return
            self.ready_at = time.time()
            end = self.ready_at + skip + steady
            while time.time() < end and self.proc.proc.poll() is None:
                time.sleep(0.25)
        finally:
            self.ended_at = time.time()
            self.proc.stop()


def judge_row(row: Row, windows: list[dict[str, Any]], sampler: Sampler) -> dict[str, Any]:
    """Truth beside the exporter's split for each of the row's GPUs, and the raw windows."""
    out = row.result
    if "error" in out or row.ready_at is None or row.proc is None:
        out.setdefault("error", "did not run")
        return out
    skip = out["skip"]
    start = row.ready_at + skip - (1.0 if skip == 0 else 0.0)
    info = (row.proc.event("ready") or {}).get("info", {})
    out["info"] = {k: v for k, v in info.items() if k != "devices"}
    out["devices"] = info.get("devices", [])
    out["truth"] = truth(row.proc.events, start, row.gpus)
    mine = [w for w in windows if row.ready_at - 2 <= w["t_unix"] <= (row.ended_at or 0) + 1]
    steady = [w for w in mine if w["t_unix"] >= row.ready_at + skip]
    out["exporter"] = {g: exporter_split(steady, g) for g in row.gpus}
    out["published"] = {g: published(steady, g) for g in row.gpus}
    out["nccl"] = nccl_seen(steady)
    out["windows"] = [raw_window(w, row, sampler) for w in mine]
    if out["workload"] == "split_bursty":
        out["util_check"] = util_check(row, steady, sampler)
    out["check"] = check(out)
    return out


def exporter_split(windows: list[dict[str, Any]], gpu: str) -> dict[str, float]:
    """Each part's share of the GPU's job seconds between the first and last steady window
    (the rate of goodput_gpu_job_seconds_total{part}), and the seconds it covers."""
    rows = [(w["t_unix"], w.get("parts", {}).get(gpu)) for w in windows]
    rows = [(t, r) for t, r in rows if r]
    if len(rows) < 2:
        return {}
    first, last = rows[0][1], rows[-1][1]
    delta = {p: last.get(p, 0.0) - first.get(p, 0.0) for p in PARTS}
    wall = rows[-1][0] - rows[0][0]
    total = sum(delta.values())
    if total <= 0:
        return {}
    out = {p: round(v / total, 4) for p, v in delta.items()}
    out["sum"] = round(sum(delta.values()) / wall, 4) if wall > 0 else 0.0
    return out


def nccl_seen(windows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Whether the daemon's NCCL source reached RAS over the steady windows (the share of
    scrapes it had answered) and the most communicators it tracked: why a row's exporter
    collectives can be missing."""
    answered = [w["nccl_ras_answered"] for w in windows if "nccl_ras_answered" in w]
    comms = [w["nccl_communicators"] for w in windows if "nccl_communicators" in w]
    return {"ras_answered": round(statistics.mean(answered), 4) if answered else None,
            "communicators": max(comms) if comms else None}


def published(windows: list[dict[str, Any]], gpu: str) -> dict[str, float | None]:
    """Medians of the gauges the model read over the row's steady windows."""
    out: dict[str, float | None] = {}
    for col in ("util", "graphics", "sm_active", "tensor", "dram", "fp32", "fp16",
                "nvlink_rx", "nvlink_tx", "pcie_rx", "pcie_tx"):
        vals = [w["gpus"].get(gpu, {}).get(col) for w in windows]
        vals = [v for v in vals if v is not None]
        out[col] = round(statistics.median(vals), 4) if vals else None
    regimes = [w["gpus"].get(gpu, {}).get("regime") or "-" for w in windows]
    out["regime"] = max(set(regimes), key=regimes.count) if regimes else None  # type: ignore
    return out


def raw_window(w: Mapping[str, Any], row: Row, sampler: Sampler) -> dict[str, Any]:
    """One scrape as the fixtures hold it (t: seconds since ready), with NVML's samples
    between the previous NVML poll and this one."""
    assert row.ready_at is not None
    poll = w.get("poll_unix")
    gpus = {}
    for g in row.gpus:
        x = dict(w["gpus"].get(g, {}))
        x.pop("flags", None)
        x["parts"] = w.get("parts", {}).get(g)
        x["wait_total"] = w.get("wait", {}).get(g)
        gpus[g] = x
    return {"t": round(w["t_unix"] - row.ready_at, 2), "t_unix": w["t_unix"], "poll_unix": poll,
            "gpus": gpus}


def attach_samples(windows: list[dict[str, Any]], sampler: Sampler) -> None:
    """Each raw window's NVML samples since the previous window's poll, and their mean."""
    prev: float | None = None
    for w in windows:
        poll = w.get("poll_unix")
        for g, x in w["gpus"].items():
            if poll is None or prev is None:
                continue
            got = [(round(t, 3), v) for t, v in sampler.samples.get(g, []) if prev < t <= poll]
            x["util_samples"] = got
            x["util_avg"] = round(statistics.mean(v for _t, v in got), 4) if got else None
        if poll is not None:
            prev = poll


def util_check(row: Row, steady: list[dict[str, Any]], sampler: Sampler) -> dict[str, Any]:
    """Published utilization against the rank's kernel time, per window and over all steady
    windows. A window is what the published figure covers: NVML's samples since the last
    poll, i.e. (the newest sample at the previous poll, the newest sample at this poll]
    (each sample covers the period since the one before it); ``poll_*`` compares the same
    figure with the poll-to-poll span instead (off by up to one sample period at an edge)."""
    assert row.proc is not None
    gpu = row.gpus[0]
    bursts = [(e["start"], e["end"]) for e in row.proc.events if e.get("event") == "burst"]
    stamps = sorted(t for t, _v in sampler.samples.get(gpu, []))

    def newest(at: float) -> float:
        older = [t for t in stamps if t <= at]
        return older[-1] if older else at

    per: list[dict[str, float]] = []
    prev = None
    for w in steady:
        poll = w.get("poll_unix")
        util = w["gpus"].get(gpu, {}).get("util")
        if poll is None or util is None or poll == prev:
            continue
        if prev is not None:
            t0, t1 = newest(prev), newest(poll)
            got = [v for t, v in sampler.samples.get(gpu, []) if t0 < t <= t1]
            per.append({"t0": t0, "t1": t1, "poll_t0": prev, "poll_t1": poll,
                        "published": util,
                        "truth": round(busy_between(bursts, t0, t1), 4),
                        "poll_truth": round(busy_between(bursts, prev, poll), 4),
                        "samples_avg": round(statistics.mean(got), 4) if got else -1.0})
        prev = poll
    if not per:
        return {"windows": 0}
    diffs = [abs(p["published"] - p["truth"]) for p in per]
    poll_diffs = [abs(p["published"] - p["poll_truth"]) for p in per]
    mean_pub = statistics.mean(p["published"] for p in per)
    mean_true = busy_between(bursts, per[0]["t0"], per[-1]["t1"])
    samp = [p for p in per if p["samples_avg"] >= 0]
    return {"windows": len(per), "mean_published": round(mean_pub, 4),
            "mean_truth": round(mean_true, 4),
            "mean_error": round(mean_pub - mean_true, 4),
            "max_window_error": round(max(diffs), 4),
            "windows_over_0.1": sum(d > UTIL_WINDOW_TOLERANCE for d in diffs),
            "poll_max_window_error": round(max(poll_diffs), 4),
            "poll_windows_over_0.1": sum(d > UTIL_WINDOW_TOLERANCE for d in poll_diffs),
            "samples_mean_error": round(statistics.mean(p["samples_avg"] for p in samp)
                                        - mean_true, 4) if samp else None,
            "samples_max_window_error": round(max(abs(p["samples_avg"] - p["truth"])
                                                  for p in samp), 4) if samp else None,
            "per_window": per}


def check(row: Mapping[str, Any]) -> dict[str, Any]:
    """PASS when every GPU's every part is within TOLERANCE and its parts sum to 1 within
    SUM_TOLERANCE (bursty rows: the utilization criteria instead)."""
    why: list[str] = []
    if row.get("workload") == "split_bursty":
        u = row.get("util_check", {})
        if not u.get("windows"):
            why.append("no windows")
        else:
            if abs(u["mean_error"]) > UTIL_MEAN_TOLERANCE:
                why.append(f"mean utilization {u['mean_published']} vs kernel time "
                           f"{u['mean_truth']}")
            if u["max_window_error"] > UTIL_WINDOW_TOLERANCE:
                why.append(f"{u['windows_over_0.1']}/{u['windows']} windows off by more than "
                           f"{UTIL_WINDOW_TOLERANCE} (worst {u['max_window_error']})")
        return {"pass": not why, "why": why}
    if len(row.get("gpus", [])) == 1 and not any((row.get("exporter") or {}).values()):
        return {"pass": None, "why": ["a one-GPU job: the exporter publishes no split for it"]}
    for gpu, t in row.get("truth", {}).items():
        e = row.get("exporter", {}).get(gpu) or {}
        if not e:
            why.append(f"GPU {gpu}: no split")
            continue
        for p in PARTS:
            if abs(e.get(p, 0.0) - t[p]) > TOLERANCE:
                why.append(f"GPU {gpu} {p} {e.get(p, 0.0):.3f} vs {t[p]:.3f}")
        if abs(e.get("sum", 0.0) - 1.0) > SUM_TOLERANCE:
            why.append(f"GPU {gpu} parts sum to {e.get('sum', 0.0):.3f} of wall time")
    if not row.get("truth"):
        why.append("no truth")
    return {"pass": not why, "why": why}


# --- the report ------------------------------------------------------------------------------

def render(result: Mapping[str, Any]) -> str:
    lines = ["| row | GPU | truth: working / transferring / waiting / host_stalled / idle "
             "| exporter: working / transferring / waiting / host_stalled / idle (sum) "
             "| worst part | check |", "|---|---|---|---|---|---|"]
    for name, row in result["rows"].items():
        if "error" in row:
            lines.append(f"| {name} | | error: {row['error']} | | | FAIL |")
            continue
        c = row.get("check", {})
        verdict = ("PASS" if c.get("pass") else "FAIL: " + "; ".join(c.get("why", []))
                   if c.get("pass") is not None else "no split: " + "; ".join(c.get("why", [])))
        if row.get("workload") == "split_bursty":
            u = row.get("util_check", {})
            lines.append(
                f"| {name} | {row['gpus'][0]} | kernel time {u.get('mean_truth')} "
                f"| published utilization {u.get('mean_published')} (mean error "
                f"{u.get('mean_error')}, worst window {u.get('max_window_error')}, "
                f"{u.get('windows_over_0.1')}/{u.get('windows')} over 0.1; against poll-to-poll "
                f"spans: worst {u.get('poll_max_window_error')}; NVML "
                f"samples averaged: {u.get('samples_mean_error')}, "
                f"{u.get('samples_max_window_error')}) | | {verdict} |")
            continue
        for i, gpu in enumerate(row["gpus"]):
            t = row.get("truth", {}).get(gpu)
            e = row.get("exporter", {}).get(gpu) or {}
            tt = " / ".join(f"{t[p]:.2f}" for p in PARTS) if t else "-"
            ee = (" / ".join(f"{e.get(p, 0):.2f}" for p in PARTS) + f" ({e.get('sum', 0):.2f})"
                  if e else "-")
            worst = (max(PARTS, key=lambda p: abs(e.get(p, 0.0) - t[p])) if t and e else None)
            ws = f"{worst} {e.get(worst, 0) - t[worst]:+.3f}" if worst and t else "-"
            lines.append(f"| {name if i == 0 else ''} | {gpu} | {tt} | {ee} | {ws} | "
                         f"{verdict if i == 0 else ''} |")
    return "\n".join(lines) + "\n"


def render_resident(result: Mapping[str, Any]) -> str:
    """The truth against a counter it never read: each GPU's kernel-resident time by the
    truth (working + transferring + waiting, copies aside) beside GPM's graphics activity,
    means over the steady windows."""
    lines = ["| row | GPU | truth resident | GPM graphics | difference | SM active | hollow "
             "(1 - SM active / graphics) |", "|---|---|---|---|---|---|---|"]
    for name, row in result["rows"].items():
        if "error" in row or row.get("workload") == "split_bursty":
            continue
        for gpu in row["gpus"]:
            t = row.get("truth", {}).get(gpu)
            steady = [w["gpus"].get(gpu, {}) for w in row.get("windows", [])
                      if w["t"] >= row["skip"]]
            gr = [x["graphics"] for x in steady if x.get("graphics") is not None]
            sm = [x["sm_active"] for x in steady if x.get("sm_active") is not None]
            if not t or not gr or not sm:
                continue
            resident = t["working"] + t["waiting"] + t.get("pure_comm", 0.0)
            g, a = statistics.mean(gr), statistics.mean(sm)
            lines.append(f"| {name} | {gpu} | {resident:.3f} | {g:.3f} | {g - resident:+.3f} | "
                         f"{a:.3f} | {1 - a / g if g else 0:.3f} |")
    return "\n".join(lines) + "\n"


def exporter_collectives(row: Mapping[str, Any], gpu: str) -> float | None:
    """Mean of the GPU's per-window collectives per second over the row's steady windows
    (None: the series was never there)."""
    got = [w["gpus"].get(gpu, {}).get("collectives") for w in row.get("windows", [])
           if w["t"] >= row["skip"]]
    vals = [v for v in got if v is not None]
    return statistics.mean(vals) if vals else None


def render_collectives(result: Mapping[str, Any]) -> str:
    """NCCL collectives per second by the ranks' own count (all they launched; the steps'
    own beside) against the exporter's goodput_gpu_collectives_total (NCCL's RAS count),
    per GPU; "-" where a side has no figure."""
    lines = ["| row | GPU | collectives/s by the ranks | of them the steps' | by the exporter "
             "| exporter / ranks |", "|---|---|---|---|---|---|"]

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    for name, row in result["rows"].items():
        if "error" in row or row.get("workload") == "split_bursty":
            continue
        for i, gpu in enumerate(row["gpus"]):
            t = row.get("truth", {}).get(gpu) or {}
            ranks, steps = t.get("collectives_per_second"), t.get("step_collectives_per_second")
            exp = exporter_collectives(row, gpu)
            ratio = f"{exp / ranks:.3f}" if exp is not None and ranks else "-"
            lines.append(f"| {name if i == 0 else ''} | {gpu} | {num(ranks)} | {num(steps)} | "
                         f"{num(exp)} | {ratio} |")
    return "\n".join(lines) + "\n"


FIXTURE_FIELDS = ("util", "util_avg", "util_samples", "graphics", "sm_active", "sm_occupancy",
                  "tensor", "dram", "fp16", "fp32", "fp64", "nvlink_rx", "nvlink_tx", "pcie_rx",
                  "pcie_tx", "processes", "parts", "peak_pcie", "peak_nvlink", "collectives",
                  "collectives_total")


def fixture(result: Mapping[str, Any], source: str) -> dict[str, Any]:
    """split.json as the model's replay tests read it (tests/fixtures/jobs): per row the
    truth per GPU and every window's readings (t: seconds since the ranks said ready; the
    row's steady windows start at ``skip``); bursty rows carry their per-window kernel time."""
    rows = {}
    for name, row in result["rows"].items():
        if "error" in row:
            continue
        out: dict[str, Any] = {"gpus": row["gpus"], "skip": row["skip"], "info": row.get("info"),
                               "truth": row.get("truth", {}), "exporter": row.get("exporter"),
                               "windows": []}
        for w in row.get("windows", []):
            out["windows"].append({"t": w["t"], "t_unix": round(w["t_unix"], 3),
                                   "poll_unix": w.get("poll_unix"),
                                   "gpus": {g: {k: x[k] for k in FIXTURE_FIELDS if k in x}
                                            for g, x in w["gpus"].items()}})
        if "util_check" in row:
            out["util_truth"] = [{k: p[k] for k in ("t0", "t1", "truth", "published",
                                                    "poll_t0", "poll_t1", "poll_truth")}
                                 for p in row["util_check"].get("per_window", [])]
        rows[name] = out
    return {"source": source, "rows": _rounded(rows)}


def _rounded(x: Any) -> Any:
    """Ratios to 4 decimals, rates and unix times to the millisecond / byte: what the
    counters can tell apart, at about half the size."""
    if isinstance(x, float):
        return round(x, 4) if abs(x) < 1e4 else round(x, 3)
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--plan", default="explore", help=f"one of {', '.join(PLANS)}")
    p.add_argument("--estimate", action="store_true",
                   help="only print the plan's estimated wall time (with --seconds, --skip)")
    p.add_argument("--slots", default="", help="only these slots of the plan (0-based: 0,2)")
    p.add_argument("--seconds", type=float, default=30.0, help="steady seconds per slot")
    p.add_argument("--skip", type=float, default=5.0, help="seconds after ready not judged")
    p.add_argument("--ready-timeout", type=float, default=90.0)
    p.add_argument("--daemon-args", default="", help="extra daemon arguments")
    p.add_argument("--gate", type=Path, help="before every slot but the first, wait (up to "
                   "180 s) for this file: another run on some of the GPUs has ended")
    p.add_argument("--bursty-minute", action="store_true",
                   help="the bursty row runs 60 s steady whatever --seconds says")
    p.add_argument("--simulate", action="store_true")
    p.add_argument("--fixture", type=Path, help="only write --out from this split.json as "
                   "the replay tests' fixture (with --source)")
    p.add_argument("--source", default="", help="the fixture's provenance line")
    p.add_argument("--report", type=Path, help="only print this split.json's tables (the "
                   "split, the collectives per second by the ranks and by the exporter, then "
                   "the truth's resident time against GPM's graphics)")
    args = p.parse_args(argv)
    if args.report:
        done = json.loads(args.report.read_text())
        print(render(done) + "\n" + render_collectives(done) + "\n" + render_resident(done))
        return 0
    if args.estimate:
        print(f"{args.plan}: {len(PLANS[args.plan])} slots, about "
              f"{plan_seconds(args.plan, args.seconds, args.skip):.0f} s")
        return 0
    if args.out is None:
        p.error("--out is required (but with --report or --estimate)")
    if args.fixture:
        made = fixture(json.loads(args.fixture.read_text()), args.source)
        args.out.write_text(json.dumps(made, separators=(",", ":")) + "\n")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    plan = PLANS[args.plan]
    if args.slots:
        plan = [plan[int(i)] for i in args.slots.split(",")]
    log = (args.out / "split-logs.txt").open("w")
    lock = threading.Lock()
    base = ["--interval", "1", "--log-format", "json", "--no-collector.serving",
            "--extended-metrics", "--no-job-environ"]
    if args.simulate:
        base += ["--simulate", "--simulate-gpus", "4"]
    daemon = DaemonProcess(*base, *(args.daemon_args.split()),
                           log=args.out / "daemon.log")
    result: dict[str, Any] = {"started": datetime.now(UTC).isoformat(), "plan": args.plan,
                              "seconds": args.seconds, "rows": {}}
    daemon.start(timeout=60)
    watch, sampler = Watch(daemon), Sampler()
    watch.start()
    sampler.start()
    job_id = 4600
    try:
        for number, slot in enumerate(plan):
            if number and args.gate:  # GPUs another run holds are given back
                wait_for(args.gate, 180.0)
            print(f"[split] slot {[n for n, _g in slot]} ...", flush=True)
            rows = []
            for name, gpus in slot:
                job_id += 1
                rows.append(Row(name, gpus, args, log, lock, job_id))
            for r in rows:
                r.start()
            for r in rows:
                r.join()
            time.sleep(1.5)  # the last window of the slot
            for r in rows:
                res = judge_row(r, list(watch.windows), sampler)
                if "windows" in res:
                    attach_samples(res["windows"], sampler)
                result["rows"][r.name_] = res
                print(f"[split] {r.name_}: {summary(res)}", flush=True)
            (args.out / "split.json").write_text(json.dumps(result))
    finally:
        watch.stop_flag.set()
        sampler.stop_flag.set()
        daemon.stop()
        log.close()
    result["sampler_error"] = sampler.error
    result["peaks"] = next((w["gpus"] for w in reversed(watch.windows)), {})
    (args.out / "split.json").write_text(json.dumps(result))
    (args.out / "split.md").write_text(render(result) + "\n" + render_collectives(result))
    print(render(result) + "\n" + render_collectives(result), flush=True)
    return 0


def wait_for(path: Path, limit: float) -> None:
    end = time.monotonic() + limit
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.5)
    print(f"[split] gate {path}: {'open' if path.exists() else 'timed out'}", flush=True)


def summary(row: Mapping[str, Any]) -> str:
    if "error" in row:
        return f"ERROR {row['error']}"
    c = row.get("check", {})
    if row.get("workload") == "split_bursty":
        u = row.get("util_check", {})
        return (f"{'PASS' if c.get('pass') else 'FAIL'} util {u.get('mean_published')} vs "
                f"{u.get('mean_truth')}, worst window {u.get('max_window_error')}, samples "
                f"{u.get('samples_mean_error')}/{u.get('samples_max_window_error')}")
    bits = []
    for gpu in row["gpus"]:
        t, e = row.get("truth", {}).get(gpu, {}), row.get("exporter", {}).get(gpu, {})
        bits.append(f"GPU {gpu} truth " + "/".join(f"{t.get(p, -1):.2f}" for p in PARTS)
                    + " exp " + "/".join(f"{e.get(p, -1):.2f}" for p in PARTS)
                    + f" gaps {t.get('gap_compute')}/{t.get('gap_comm')}/{t.get('gap_copy')}")
    return ("PASS " if c.get("pass") else "FAIL ") + "; ".join(bits)


if __name__ == "__main__":
    sys.exit(main())
