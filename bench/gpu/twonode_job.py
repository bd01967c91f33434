"""[lost] one host as two nodes, on real GPUs: a job whose ranks measure their own waiting
runs across two daemons that each own half of the host's GPUs (``--devices``), and a real
Prometheus with the mixin's rules judges it the way it judges a job across machines
(``testkit/twonode.py``). Writes ``twonode-job.json``: the rules' straggler, waited GPU-hours
and time split beside the ranks' own truth over the same span.

    PYTHONUNBUFFERED=1 python3 -m bench.gpu.twonode_job --out "$OUT" --devices-a 0 \\
        --devices-b 1 --seconds 60 --prometheus /tmp/prometheus
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.gpu.jobs import launch, truth
from bench.gpu.workloads.process import WorkloadProcess
from testkit.harness import REPO
from testkit.twonode import Plan, run


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Start the job, let both daemons and the rules watch it, stop it; truth over the span
    the rules measured (their last ``--seconds``)."""
    opts = ["--extra", str(args.extra)]
    row = argparse.Namespace(simulate=False, no_torchrun=False, seconds=args.seconds + 120)
    cmd, env = launch(args.row, args.workload, opts, row, "4242")
    log = (args.out / "twonode-job-logs.txt").open("w")
    proc = WorkloadProcess("twonode", cmd, REPO, env, log, threading.Lock())
    try:
        if not proc.wait_ready(90):
            return {"error": (proc.event("error") or {}).get("error", "no ready")}
        plan = Plan(devices_a=args.devices_a, devices_b=args.devices_b, seconds=args.seconds,
                    out=args.out, prometheus=args.prometheus)
        rules = run(plan)
        end = time.time()
    finally:
        proc.stop()
        log.close()
    waited = truth(proc.events, end - args.seconds, 0.0)
    hours = sum(d.get("waited", 0.0) for d in waited.values()) * args.seconds / 3600
    return {"command": cmd[:8], "truth": waited, "truth_waited_gpu_hours": round(hours, 6),
            "rules": rules}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--devices-a", default="0")
    p.add_argument("--devices-b", default="1")
    p.add_argument("--seconds", type=float, default=60.0, help="span the rules measure")
    p.add_argument("--prometheus", default="prometheus")
    p.add_argument("--row", default="straggler_10pct", help="how it starts (bench/gpu/jobs.py)")
    p.add_argument("--workload", default="job_straggler")
    p.add_argument("--extra", type=float, default=0.10)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result = measure(args)
    (args.out / "twonode-job.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "rules"}, indent=1))
    rules = result.get("rules", {})
    print(json.dumps({k: rules.get(k) for k in ("stragglers", "named", "jobs", "alerts")
                      if k in rules}, indent=1)[:6000])
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
