"""Memory and CPU per serving body: an 8 MiB valid vLLM-shaped /metrics, before and after.

The body is what a big vLLM v1 deployment sends: every family vLLM 0.10/0.11 exports
(gauges, counters with their ``_created`` gauges, fourteen histograms with their buckets)
for many (model, data-parallel engine) pairs, until it is just under ``--bytes``. It is
served by a separate ``python -m http.server`` process, so only the scraper's memory counts.

Two measurements per tree (this checkout, and ``--baseline REF`` extracted with
``git archive``):

* parse: a fresh interpreter imports the serving source, fetches the body once with the
  real ``fetch()``, then times ``scrape.interpret()`` (detect + parse + read) ``--runs``
  times; it reports the median, and its peak RSS (VmHWM) after a full ``scrape()``;
* daemon: the real daemon (``python -m exporter --simulate``) scrapes the body every second
  for ``--seconds``; its peak RSS (VmHWM) and CPU seconds per scrape are read from /proc.

    python -m bench.serving.serving_body                # this tree and the baseline, JSON out
    python -m bench.serving.serving_body --baseline ""  # this tree only
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from testkit.harness import (
    REPO,
    DaemonProcess,
    free_port,
    proc_cpu_seconds,
    stop_process,
    wait_http,
)

BASELINE = "03e34db"
"""main before issue 22 item 5 (whole-body prometheus-client parse)."""

MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct",
          "mistralai/Mistral-7B-Instruct-v0.3", "google/gemma-2-9b-it")  # fmt: skip
LATENCY = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
           7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000,
          131072)  # fmt: skip
HISTOGRAMS = {
    "vllm:iteration_tokens_total": TOKENS[:12],
    "vllm:request_prompt_tokens": TOKENS,
    "vllm:request_generation_tokens": TOKENS,
    "vllm:request_max_num_generation_tokens": TOKENS,
    "vllm:request_params_n": (1, 2, 5, 10, 20),
    "vllm:request_params_max_tokens": TOKENS,
    "vllm:time_to_first_token_seconds": LATENCY,
    "vllm:time_per_output_token_seconds": LATENCY[:15],
    "vllm:inter_token_latency_seconds": LATENCY[:15],
    "vllm:e2e_request_latency_seconds": LATENCY,
    "vllm:request_queue_time_seconds": LATENCY,
    "vllm:request_inference_time_seconds": LATENCY,
    "vllm:request_prefill_time_seconds": LATENCY,
    "vllm:request_decode_time_seconds": LATENCY,
}
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
COUNTERS = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:num_preemptions",
            "vllm:prompt_tokens", "vllm:generation_tokens")  # fmt: skip
REASONS = ("stop", "length", "abort")


def _labels(model: str, engine: int, extra: str = "") -> str:
    return f'engine="{engine}",model_name="{model}"{extra}'


def _pairs(n: int) -> Iterator[tuple[str, int]]:
    for engine in range(n):
        for model in MODELS:
            yield model, engine


def vllm_body(engines: int) -> str:
    """vLLM v1's families for ``engines`` data-parallel ranks of each of :data:`MODELS`."""
    out: list[str] = []
    pairs = list(_pairs(engines))
    for name in GAUGES:
        out += [f"# HELP {name} Gauge.", f"# TYPE {name} gauge"]
        out += [f"{name}{{{_labels(m, e)}}} {e % 7}.0" for m, e in pairs]
    for name in (*COUNTERS, "vllm:request_success"):
        reasons = REASONS if name == "vllm:request_success" else ("",)
        sets = [_labels(m, e, f',finished_reason="{r}"' if r else "") for m, e in pairs
                for r in reasons]  # fmt: skip
        out += [f"# HELP {name}_total Counter.", f"# TYPE {name}_total counter"]
        out += [f"{name}_total{{{s}}} {1000 + i}.0" for i, s in enumerate(sets)]
        out += [f"# HELP {name}_created Counter.", f"# TYPE {name}_created gauge"]
        out += [f"{name}_created{{{s}}} 1.7640432e+09" for s in sets]
    for name, buckets in HISTOGRAMS.items():
        out += [f"# HELP {name} Histogram.", f"# TYPE {name} histogram"]
        for m, e in pairs:
            labels = _labels(m, e)
            out += [f'{name}_bucket{{{labels},le="{b:g}.0"}} {i}.0' for i, b in enumerate(buckets)]
            out += [f'{name}_bucket{{{labels},le="+Inf"}} {len(buckets)}.0',
                    f"{name}_count{{{labels}}} {len(buckets)}.0",
                    f"{name}_sum{{{labels}}} 123.25"]  # fmt: skip
        out += [f"# HELP {name}_created Histogram.", f"# TYPE {name}_created gauge"]
        out += [f"{name}_created{{{_labels(m, e)}}} 1.7640432e+09" for m, e in pairs]
    return "\n".join(out) + "\n"


def body_under(limit: int) -> str:
    """The largest :func:`vllm_body` not over ``limit`` bytes."""
    per = len(vllm_body(1).encode())
    engines = max(limit // per, 1)
    while len(vllm_body(engines + 1).encode()) <= limit:
        engines += 1
    while engines > 1 and len(vllm_body(engines).encode()) > limit:
        engines -= 1
    return vllm_body(engines)


CHILD = r"""
import asyncio, json, statistics, sys, time
import aiohttp
from exporter.process.memory import tune_malloc
from exporter.sources.serving import scrape as s
from exporter.sources.serving.fetch import fetch
from exporter.sources.serving.targets import Target

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024

async def main(url, runs):
    tune_malloc()
    base = status("VmRSS")
    async with aiohttp.ClientSession() as session:
        outcome = await s.scrape(session, Target(url=url), 30.0, 8 * 1024 * 1024)
        assert outcome.reading is not None, outcome.error
        scrape_peak = status("VmHWM")
        text = (await fetch(session, url, 30.0, 8 * 1024 * 1024)).text
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        reading = s.interpret(text)
        times.append(time.perf_counter() - t0)
    values = {"|".join(k): v for k, v in reading.values.items()}
    print(json.dumps({
        "rss_after_imports_mib": base, "peak_rss_after_one_scrape_mib": scrape_peak,
        "peak_rss_mib": status("VmHWM"), "interpret_ms": [t * 1000 for t in times],
        "interpret_median_ms": statistics.median(times) * 1000,
        "engine": reading.engine, "values": len(values),
        "generation_total": sum(v for k, v in reading.values.items()
                                if k[0] == "generation_tokens"),
    }))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextmanager
def body_server(text: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "metrics").write_text(text)
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
            cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            wait_http(url)
            yield url
        finally:
            stop_process(proc)


@contextmanager
def tree(ref: str) -> Iterator[Path]:
    """This checkout ("") or ``ref``'s exporter package in a temporary folder."""
    if not ref:
        yield REPO
        return
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", ref, "exporter"], cwd=REPO,
                                 capture_output=True, check=True).stdout  # fmt: skip
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp)


def parse_run(root: Path, url: str, runs: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-P", "-c", CHILD, url, str(runs)], cwd=root,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def daemon_run(root: Path, url: str, seconds: float) -> dict[str, Any]:
    proc = DaemonProcess(
        "--simulate", "--simulate-gpus", "2", "--serving-target", url,
        python=f"{sys.executable} -P", env={"PYTHONPATH": str(root)},
    )  # fmt: skip
    proc.start(ready_path="/healthz")
    try:
        assert proc.pid is not None
        cpu0 = proc_cpu_seconds(proc.pid) or 0.0
        time.sleep(seconds)
        cpu = (proc_cpu_seconds(proc.pid) or 0.0) - cpu0
        return {"daemon_peak_rss_mib": vm_hwm_mib(proc.pid), "daemon_cpu_share": cpu / seconds}
    finally:
        proc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=8 * 1024 * 1024)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--baseline", default=BASELINE, help='git ref; "" for none')
    args = parser.parse_args(argv)
    text = body_under(args.bytes)
    lines = text.count("\n")
    report: dict[str, Any] = {"body_bytes": len(text.encode()), "body_lines": lines}
    with body_server(text) as url:
        for label, ref in (("baseline", args.baseline), ("current", "")):
            if label == "baseline" and not ref:
                continue
            with tree(ref) as root:
                report[label] = {"ref": ref or "working tree", **parse_run(root, url, args.runs)}
                if args.seconds > 0:
                    report[label].update(daemon_run(root, url, args.seconds))
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
