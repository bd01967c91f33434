"""What every recording rule and alert costs, before and after issue 49, on real Prometheus
holding one simulated fleet: samples touched per minute and rule seconds, per 1,000 GPUs,
per rule and in all.

    python -m bench.fleet.rulecost --nodes 125 --report docs/validation/fleet/rulecost-1000.json

"Before" is the rule files of ``--before-rev`` (default: main before issue 49's changes)
over the fleet as the exporter published it then (a seconds counter for all nine regimes
on every GPU); "after" is the working tree's rules over today's exporter. Both in the same
run, one after the other, on the same fleet plan and machine: raw history backfilled
(``--hours``) into a fresh TSDB with that side's recording rules backfilled over it. Then
each rule's expression runs as an instant query with ``stats=all`` at the present, as the
ruler would evaluate it, ``--reps`` times: Prometheus's own count of the samples the query
touched (``totalQueryableSamples``) and the median wall time. Per minute: a recording group
runs every ``interval`` (1 m), an alert group every ``--alert-interval`` (15 s here, as the
issue measured; Prometheus's default evaluation_interval is 1 m). The fleet is
bench/fleet/generator.py's (half training, half serving, faults injected).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from bench.fleet import generator as fleet
from bench.fleet.measure import timed_query
from bench.fleet.stack import backfill_rules, log, prometheus, rendered, report_options
from exporter.model.core import REGIMES
from exporter.process.logging import configure
from mixin.config import seconds

REPO = Path(__file__).resolve().parents[2]
FILES = ("alerts/goodput.rules.yml", "alerts/goodput_alerts.rules.yml")
# Today's main when issue 49 was taken up: the rules "before".
BEFORE_REV = "c4d8da2"


def legacy_exporter(traces: fleet.Traces) -> fleet.Traces:
    """The traces as the exporter before issue 49 published them: a seconds counter for each
    of the nine regimes on every GPU, zeros included (it now publishes only regimes with
    time in them), for the "before" fleet."""
    name = "goodput_gpu_regime_seconds_total"
    gpu: dict[str, list[fleet.Series]] = {}
    for archetype, series in traces.gpu.items():
        have = {dict(s.labels).get("regime") for s in series if s.sample == name}
        model = next((s for s in series if s.sample == name), None)
        extra = [] if model is None else [
            fleet.Series(model.family, model.kind, name,
                         tuple(sorted({**dict(model.labels), "regime": r}.items())),
                         [0.0] * len(model.values), True)
            for r in REGIMES if r not in have]
        gpu[archetype] = [*series, *extra]
    return fleet.Traces(defaultdict(list, gpu), traces.node)


def rule_sets(before_rev: str) -> dict[str, list[dict[str, Any]]]:
    """"before" / "after" -> every group of both files."""
    out: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for rel in FILES:
        old = subprocess.run(["git", "-C", str(REPO), "show", f"{before_rev}:{rel}"],
                             capture_output=True, text=True, check=True).stdout
        out["before"] += yaml.safe_load(old)["groups"]
        out["after"] += yaml.safe_load((REPO / rel).read_text())["groups"]
    return out


def per_minute(group: dict[str, Any], alert_interval: str) -> float:
    """Evaluations a minute of ``group``."""
    return 60 / seconds(group.get("interval") or alert_interval)


def cost(url: str, groups: list[dict[str, Any]], at: float, reps: int, gpus: int,
         alert_interval: str) -> dict[str, Any]:
    """Per rule and in all: samples touched and seconds, a round and a minute, per 1,000 GPUs."""
    rules = []
    for g in groups:
        k = per_minute(g, alert_interval)
        for r in g["rules"]:
            runs = [timed_query(url, r["expr"], at, 0, 0, True) for _ in range(reps)]
            secs = statistics.median(x[0] for x in runs)
            rules.append({"group": g["name"], "rule": r.get("record") or r["alert"],
                          "per_minute": k, "samples": runs[0][1], "seconds": round(secs, 4),
                          "series": runs[0][2]})
    scale = 1000 / gpus
    samples_min = sum(r["samples"] * r["per_minute"] for r in rules) * scale
    seconds_min = sum(r["seconds"] * r["per_minute"] for r in rules) * scale
    groups_s: dict[str, float] = {}
    for r in rules:
        groups_s.setdefault(r["group"], 0.0)
        groups_s[r["group"]] += r["seconds"] * scale
    return {"rules": rules,
            "samples_per_minute_per_1000_gpus": round(samples_min),
            "rule_seconds_per_minute_per_1000_gpus": round(seconds_min, 3),
            "group_seconds_per_round_per_1000_gpus": {k: round(v, 3)
                                                      for k, v in groups_s.items()}}


def measure(args: argparse.Namespace, name: str, groups: list[dict[str, Any]],
            replay: fleet.Replay) -> dict[str, Any]:
    """One side: its fleet's raw history and its recording rules backfilled into a fresh
    TSDB, then every rule of ``groups`` run against it."""
    workdir = args.workdir / name
    shutil.rmtree(workdir, ignore_errors=True)
    data, scratch = workdir / "data", workdir / "scratch"
    data.mkdir(parents=True)
    scratch.mkdir()
    end = float(int(time.time() + args.lead))
    hours = args.hours + args.lead / 3600
    fleet.backfill_raw(replay, replay.fleet.nodes, data, scratch, end, hours, hours, log=log)
    shutil.rmtree(scratch)
    recording = [g for g in groups if any("record" in r for r in g["rules"])]
    backfill_rules(workdir, recording, end - hours * 3600 + 1200, end, log=log)
    gpus = len(replay.fleet.gpus)
    with prometheus(workdir, {"scrape_configs": []}) as prom:
        at = float(int(time.time()))
        out = cost(prom.url, groups, at, args.reps, gpus, args.alert_interval)
        series = {}
        for kind, selector in (("raw", '{__name__=~"goodput_.+"}'),
                               ("recorded", '{__name__=~"goodput:.+"}')):
            result = prom.query(f"count({selector})", at=at)
            series[kind] = round(int(float(result[0]["value"][1])) / gpus, 2) if result else 0
        out["series_per_gpu"] = series
    shutil.rmtree(workdir, ignore_errors=True)
    return out


def render(report: dict[str, Any]) -> str:
    """The report as the markdown tables of docs/benchmarks.md."""
    b, a = report["before"], report["after"]
    out = [f"{report['gpus']:,} GPUs ({report['nodes']} nodes), {report['cpus']} CPUs "
           "(shared with other work). Recording groups every 1 m; alert groups every "
           f"{report['alert_interval']} before (Prometheus's global interval), every 1 m after "
           "(they carry the rule interval). Rule seconds: each rule's query time, summed.", "",
           "| per 1,000 GPUs | before | after | after / before |", "|---|---|---|---|"]
    for key, label in (("samples_per_minute_per_1000_gpus", "samples touched a minute"),
                       ("rule_seconds_per_minute_per_1000_gpus", "rule seconds a minute")):
        out.append(f"| {label} | {b[key]:,} | {a[key]:,} | {a[key] / b[key]:.2f} |")
    out += ["", "| group | before: s a round per 1,000 GPUs | after |", "|---|---|---|"]
    names = dict.fromkeys([*b["group_seconds_per_round_per_1000_gpus"],
                           *a["group_seconds_per_round_per_1000_gpus"]])
    for g in names:
        out.append(f"| {g} | {b['group_seconds_per_round_per_1000_gpus'].get(g, '-')} | "
                   f"{a['group_seconds_per_round_per_1000_gpus'].get(g, '-')} |")
    out += ["", "Largest rules, samples touched a minute per 1,000 GPUs:", "",
            "| rule | before | after |", "|---|---|---|"]
    scale = 1000 / report["gpus"]

    def per_rule(side: dict[str, Any]) -> dict[str, float]:
        return {r["rule"]: r["samples"] * r["per_minute"] * scale for r in side["rules"]}

    pb, pa = per_rule(b), per_rule(a)
    top = sorted(set(pb) | set(pa), key=lambda r: -max(pb.get(r, 0), pa.get(r, 0)))[:12]
    out += [f"| {r} | {pb[r]:,.0f} |" if r not in pa else
            f"| {r} | {pb[r]:,.0f} | {pa[r]:,.0f} |" if r in pb else f"| {r} | - | {pa[r]:,.0f} |"
            for r in top]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=float, default=0.5)
    parser.add_argument("--lead", type=float, default=900)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--alert-interval", default="15s")
    parser.add_argument("--before-rev", default=BEFORE_REV)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fleet-rulecost"))
    report_options(parser, "fleet-rulecost.json")
    args = parser.parse_args(argv)
    if rendered(args, render):
        return 0

    configure(level="warning")  # the archetypes' regime changes are not news here
    sets = rule_sets(args.before_rev)
    plan = fleet.plan(args.nodes, args.gpus)
    traces = fleet.record_archetypes()
    report: dict[str, Any] = {"nodes": args.nodes, "gpus": len(plan.gpus),
                              "cpus": os.cpu_count(), "alert_interval": args.alert_interval,
                              "before_rev": args.before_rev}
    for name, side in (("before", legacy_exporter(traces)), ("after", traces)):
        report[name] = measure(args, name, sets[name], fleet.Replay(plan, side))
        log(f"{name}: {report[name]['samples_per_minute_per_1000_gpus']:,} samples/min, "
            f"{report[name]['rule_seconds_per_minute_per_1000_gpus']} s/min per 1,000 GPUs, "
            f"series per GPU {report[name]['series_per_gpu']}")
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
