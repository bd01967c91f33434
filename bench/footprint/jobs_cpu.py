"""CPU cost of the /proc job-identity source: 8 GPUs, 64 to 10,000 real processes, 1 s polls.

Starts ``sleep`` processes whose environment looks like a Slurm job step's (about 3 KiB,
SLURM_JOB_ID among ~40 variables), lists them as NVML would (spread over 8 GPUs), and polls
the source on the real /proc once a second, as ``jobs.interval: 1`` would. They run outside
any Slurm cgroup, so their claim is refused after a walk up their parents: the costliest
path. Reports the CPU time (process_time: the poll and its reader threads) per poll:

- ``steady``: every process already known, what a node running its jobs pays, at each
  count of ``--counts`` (64, 1,000 and 10,000 by default);
- ``churning``: the cache emptied before each poll, as if every process were new at every
  poll (the worst churn), at the largest count;
- ``off``: the same loop without the source (the baseline).

Each measurement runs in a fresh interpreter against one source tree: this one, and with
``--before DIR`` also an older tree (e.g. ``git archive <commit> exporter | tar -x -C DIR``),
so both are measured on the same processes in the same run. Feeds docs/benchmarks.md. Run by
hand on any Linux machine:

    python3 bench/footprint/jobs_cpu.py [--counts 64,1000,10000] [--before DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GPUS = 8
REPO = Path(__file__).resolve().parents[2]


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


def start_processes(count: int) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(["sleep", "3600"], env=job_environment(rank), start_new_session=True)
        for rank in range(count)
    ]


def measure(poll: Callable[[], object], polls: int) -> dict[str, float]:
    """Poll once a second ``polls`` times; CPU per poll and as a share of one core."""
    cpus = []
    for _ in range(polls):
        tick = time.monotonic()
        c = time.process_time()  # every thread: the reads run on the reader's
        poll()
        cpus.append(time.process_time() - c)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    per_poll = statistics.fmean(cpus)
    return {
        "polls": len(cpus),
        "cpu_ms_per_poll_mean": round(per_poll * 1e3, 3),
        "cpu_ms_per_poll_median": round(statistics.median(cpus) * 1e3, 3),
        "core_percent_at_1s": round(per_poll * 100, 3),
    }


def _fixed(listed: tuple[object, ...]) -> Callable[[], tuple[Any, ...]]:
    return lambda: listed


def measure_tree(
    pids: list[int], counts: list[int], polls: int, churn_polls: int
) -> dict[str, object]:
    """In this interpreter (whose ``exporter`` is the tree under test)."""
    from exporter.readings import ProcessInfo
    from exporter.sources.jobs.config import JobsConfig
    from exporter.sources.jobs.procfs import ProcJobSource

    report: dict[str, object] = {"off": measure(lambda: None, polls)}
    for count in counts:
        listed = tuple(ProcessInfo(str(i % GPUS), pid) for i, pid in enumerate(pids[:count]))
        source = ProcJobSource(JobsConfig(interval=1.0), "/proc", platform.node(),
                               processes=_fixed(listed))
        c, t = time.process_time(), time.monotonic()
        first = source.poll_blocking()
        assert first.ok, first.error
        report[f"first_{count}"] = {"cpu_ms": round((time.process_time() - c) * 1e3, 1),
                                    "wall_ms": round((time.monotonic() - t) * 1e3, 1)}
        report[f"steady_{count}"] = measure(source.poll_blocking, polls)
        if count == counts[-1]:
            def churn(source: ProcJobSource = source) -> object:
                source._cache.clear()
                return source.poll_blocking()

            report[f"churning_{count}"] = measure(churn, churn_polls)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="64,1000,10000")
    parser.add_argument("--polls", type=int, default=8, help="steady polls per count")
    parser.add_argument("--churn-polls", type=int, default=3)
    parser.add_argument("--before", default="", help="an older source tree to measure too")
    parser.add_argument("--out", default="")
    parser.add_argument("--measure", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    counts = sorted(int(c) for c in args.counts.split(","))
    if args.measure:  # the child: measure the tree on PYTHONPATH against these pids
        pids = json.loads(Path(args.measure).read_text())
        print(json.dumps(measure_tree(pids, counts, args.polls, args.churn_polls)))
        return 0
    started = time.monotonic()
    children = start_processes(counts[-1])
    spawn = time.monotonic() - started
    report: dict[str, object] = {
        "gpus": GPUS, "counts": counts, "spawn_seconds": round(spawn, 1),
        "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump([c.pid for c in children], f)
        trees = [("after", str(REPO))] + ([("before", args.before)] if args.before else [])
        for name, tree in trees:
            done = subprocess.run(
                [sys.executable, __file__, "--measure", f.name, "--counts", args.counts,
                 "--polls", str(args.polls), "--churn-polls", str(args.churn_polls)],
                env={**os.environ, "PYTHONPATH": tree}, capture_output=True, text=True,
                check=False, cwd=tempfile.gettempdir())
            if done.returncode != 0:
                raise SystemExit(f"{name}: {done.stderr[-2000:]}")
            report[name] = json.loads(done.stdout.splitlines()[-1])
    finally:
        os.unlink(f.name)
        for child in children:
            child.kill()
        for child in children:
            child.wait()
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
