"""The fleet on real shards at full size: two hashmod shards and a global Prometheus reading
them through /federate (bench/fleet/stack.py), live.

    python -m bench.fleet.sharded --nodes 1000 --report docs/validation/fleet/sharded-8000.json

tests/test_fleet_sharded.py proves the same at 20 nodes in CI; this runs it at 8,000 GPUs.
The history runs ``--lead`` seconds past the start, so the groups evaluate live on current
data while the backfill's minutes pass. Measures each rule group's evaluation time on the
server it belongs to (``prometheus_rule_group_last_duration_seconds`` at every evaluation,
first and later ones apart), the series each server holds, and checks the verdicts at scale:
every alert's firing set is exactly the injected one (shard alerts over every shard, global
ones on the global server) and the straggler rule names every injected straggler and no
balanced job. Writes a JSON report; docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import yaml

from bench.fleet import generator as fleet
from bench.fleet.stack import (
    ALERTS,
    GLOBAL_PREFIX,
    Stack,
    log,
    rendered,
    report_options,
    sharded,
    watch_groups,
)
from mixin.config import load as load_config
from mixin.names import JOB_STRAGGLER


def _gpus(result: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(s["metric"].get("node", ""), s["metric"].get("gpu", "")) for s in result}


def verdicts(st: Stack, plan: fleet.Fleet) -> dict[str, Any]:
    """Each alert's firing set against the injected one, and the straggler rule's names."""
    expected = fleet.expected_alerts(plan)
    alerts: dict[str, Any] = {}
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            if group["name"].startswith(GLOBAL_PREFIX):
                fired = _gpus(st.global_.query(rule["expr"]))
            else:
                fired = set().union(*(_gpus(s.query(rule["expr"])) for s in st.shards))
            want = expected.get(rule["alert"], set())
            alerts[rule["alert"]] = {"fired": len(fired), "injected": len(want),
                                     "false_positives": len(fired - want),
                                     "missed": len(want - fired)}
    threshold = load_config().alerts["GPUJobStraggler"].thresholds["min_waiting_gap"]
    gaps = {fleet.job_key(s["metric"]): ((s["metric"]["node"], s["metric"]["gpu"]),
                                         float(s["value"][1]))
            for s in st.global_.query(JOB_STRAGGLER)}
    named = {gpu for gpu, gap in gaps.values() if gap >= threshold}
    balanced_named = {job for job, (_, gap) in gaps.items()
                      if job in plan.balanced_jobs and gap >= threshold}
    return {"alerts": alerts, "straggler": {
        "jobs": len(plan.straggler_jobs | plan.balanced_jobs),
        "jobs_with_a_gap": len(gaps), "injected": len(plan.stragglers),
        "named": len(named), "named_right": len(named & plan.stragglers),
        "balanced_jobs_named": len(balanced_named)}}


def series_counts(st: Stack) -> dict[str, int]:
    out = {}
    for name, server in [*((f"shard{i}", s) for i, s in enumerate(st.shards)),
                         ("global", st.global_)]:
        result = server.query('count({__name__=~".+"})')
        out[name] = int(float(result[0]["value"][1])) if result else 0
    return out


def render(report: dict[str, Any]) -> str:
    """The report as the markdown tables of docs/benchmarks.md."""
    gpus = report["gpus"]
    out = ["| server | rule group | evaluations | first s | later: median / max s |",
           "|---|---|---|---|---|"]
    for key, g in report["rule_groups"].items():
        server, group = key.split(" ", 1)
        out.append(f"| {server} | {group} | {g['evaluations']} | {g['first_s']:.3f} | "
                   f"{g['later_median_s']:.3f} / {g['later_max_s']:.3f} |")
    out += ["", "| alert | injected | fired | false positives | missed |", "|---|---|---|---|---|"]
    quiet = []
    for alert, v in report["verdicts"]["alerts"].items():
        if v["injected"] or v["fired"]:
            out.append(f"| {alert} | {v['injected']} | {v['fired']} | {v['false_positives']} | "
                       f"{v['missed']} |")
        else:
            quiet.append(alert)
    st = report["verdicts"]["straggler"]
    series = report["series"]
    out += ["", f"Nothing injected and nothing fired: {', '.join(quiet)}.",
            f"Straggler rule: {st['jobs']} multi-node jobs, {st['injected']} injected "
            f"stragglers, {st['named_right']} named right of {st['named']} named, "
            f"{st['balanced_jobs_named']} balanced jobs named.",
            "Series: " + ", ".join(f"{k} {v:,}" for k, v in series.items())
            + f" ({sum(v for k, v in series.items() if k != 'global') / gpus:.1f} per GPU on "
            f"the shards, {series['global'] / gpus:.1f} on the global)."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=float, default=0.75, help="history behind the start")
    parser.add_argument("--lead", type=float, default=1200,
                        help="seconds of data past the start, evaluated live")
    parser.add_argument("--rounds", type=int, default=5, help="evaluations of every group")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fleet-sharded"))
    report_options(parser, "fleet-sharded.json")
    args = parser.parse_args(argv)
    if rendered(args, render):
        return 0

    shutil.rmtree(args.workdir, ignore_errors=True)
    plan = fleet.plan(args.nodes, args.gpus)
    replay = fleet.Replay(plan, fleet.record_archetypes())
    started = time.time()
    end = float(int(started + args.lead))
    report: dict[str, Any] = {"nodes": args.nodes, "gpus": len(plan.gpus), "shards": 2,
                              "cpus": os.cpu_count(), "hours": args.hours}
    with sharded(args.workdir, replay, end, hours=args.hours + args.lead / 3600,
                 interval="15s", log=log) as st:
        report["build_s"] = round(time.time() - started)
        report["owned_nodes"] = [sum(1 for o in st.owner.values() if o == s)
                                 for s in range(len(st.shards))]
        log(f"stack up after {report['build_s']} s; nodes per shard {report['owned_nodes']}")
        if time.time() > end - 600:
            raise SystemExit("the build outlived --lead: raise it")
        servers = {f"shard{i}": s for i, s in enumerate(st.shards)} | {"global": st.global_}
        report["rule_groups"] = watch_groups(servers, args.rounds,
                                             min(900, end - time.time() - 300), log)
        report["verdicts"] = verdicts(st, plan)
        report["series"] = series_counts(st)
        log(json.dumps(report["verdicts"]))
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
