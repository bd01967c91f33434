"""CPU cost of the /proc job-identity source: 8 GPUs, 64 real processes, 1 s polls.

Starts 64 ``sleep`` processes whose environment looks like a Slurm job step's (about 3 KiB,
SLURM_JOB_ID among ~40 variables), lists them as NVML would (8 per GPU), and polls the
source on the real /proc once a second, as ``jobs.interval: 1`` would. They run outside any
Slurm cgroup, so their claim is refused after a walk up their parents: the costliest path.
Reports the CPU time (process_time: the poll and its reader threads) per poll in three
states: ``steady`` (every process already cached: what a node running its jobs pays),
``cold`` (the cache emptied before each poll: as if all 64
processes were new every second, the worst churn) and ``off`` (the same loop without the
source: the baseline). Feeds docs/benchmarks.md. Run by hand on any Linux machine:
    python3 -m bench.footprint.jobs_cpu [--seconds 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time
from collections.abc import Callable

from exporter.readings import ProcessInfo
from exporter.sources.jobs.config import JobsConfig
from exporter.sources.jobs.procfs import ProcJobSource

GPUS = 8
PROCESSES = 64


def job_environment(rank: int) -> dict[str, str]:
    """A Slurm step's environment, roughly the size srun gives one task."""
    env = {f"SLURM_VAR_{i}": "x" * 48 for i in range(40)}
    env.update(
        PATH="/usr/local/bin:/usr/bin:/bin",
        HOME="/home/user",
        SLURM_JOB_ID="123456",
        SLURM_PROCID=str(rank),
        LOCAL_RANK=str(rank % GPUS),
    )
    return env


def start_processes() -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(["sleep", "3600"], env=job_environment(rank), start_new_session=True)
        for rank in range(PROCESSES)
    ]


def measure(poll: Callable[[], object], seconds: float) -> dict[str, float]:
    """Poll once a second for ``seconds``; CPU per poll and as a share of one core."""
    cpus = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        tick = time.monotonic()
        c = time.process_time()  # every thread: the reads run on the reader's
        poll()
        cpus.append(time.process_time() - c)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    per_poll = statistics.fmean(cpus)
    return {
        "polls": len(cpus),
        "cpu_us_per_poll_mean": round(per_poll * 1e6, 1),
        "cpu_us_per_poll_median": round(statistics.median(cpus) * 1e6, 1),
        "core_percent_at_1s": round(per_poll * 100, 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    children = start_processes()
    try:
        listed = tuple(
            ProcessInfo(str(i % GPUS), child.pid) for i, child in enumerate(children)
        )
        source = ProcJobSource(
            JobsConfig(interval=1.0), "/proc", platform.node(), processes=lambda: listed
        )
        first = source.poll_blocking()
        assert first.ok, first.error

        def cold() -> object:
            source._cache.clear()
            return source.poll_blocking()

        report = {
            "gpus": GPUS,
            "processes": PROCESSES,
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "jobs_found": sorted({j.job_id for j in first.reading.gpus.values()}),  # type: ignore[attr-defined]
            "off": measure(lambda: None, args.seconds),
            "steady": measure(source.poll_blocking, args.seconds),
            "cold": measure(cold, args.seconds),
        }
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
