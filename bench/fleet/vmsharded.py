"""The fleet through the sharded VictoriaMetrics path, live: bench/fleet/generator.py's
simulated nodes served on loopback, scraped by two vmagent members of one scraping cluster
into one VictoriaMetrics, one vmalert per shard with the rule files `python -m mixin --shards
2` generates (shard 0's also runs the global groups).

    python -m bench.fleet.vmsharded --nodes 500 --report docs/validation/fleet/vmsharded-4000.json

Nothing is backfilled: the fleet starts when the run does, at the shipped configuration
(15 s scrapes, every rule group every minute, VictoriaMetrics' and vmalert's defaults), and
runs ``--minutes``. Measures, per 1,000 GPUs: series stored (raw and recorded), samples
ingested a second, each process's resident memory (VictoriaMetrics, each vmagent, each
vmalert), each rule group's evaluation time on its vmalert (vmalert_iteration_duration_seconds
over the run); checks that every target is scraped by exactly one member, and what every
alert's expression picks against the injected faults (the `for:` durations outlast a short
run, so the expressions are queried, as bench/fleet/sharded.py does on Prometheus). The tests
(tests/test_vm_sharded.py) prove the same path small. Writes a JSON report;
docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from bench.fleet import generator as fleet
from bench.fleet.live import JOB, served, write_shard_rules
from bench.fleet.stack import ALERTS, log, rendered, report_options
from testkit.harness import proc_rss_bytes
from testkit.victoria import VictoriaMetrics, VmAgent, VmAlert, vmagent, vmalert

ITERATION = re.compile(r'vmalert_iteration_duration_seconds(_sum|_count|)'
                       r'\{group="([^"]+)",[^}]*?(?:quantile="1")?\} (\S+)')


def rss_mb(process: Any) -> float:
    rss = proc_rss_bytes(process.process.pid)
    return round(rss.get("VmRSS", 0) / 2**20, 1)


def _gpus(result: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(s["metric"].get("node", ""), s["metric"].get("gpu", "")) for s in result}


def verdicts(vm: VictoriaMetrics, plan: fleet.Fleet) -> dict[str, Any]:
    """Each alert expression's picks against the injected faults, over the whole store."""
    expected = fleet.expected_alerts(plan)
    out = {}
    now = time.time()
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            fired = _gpus(vm.query(rule["expr"], now))
            want = expected.get(rule["alert"], set())
            out[rule["alert"]] = {"fired": len(fired), "injected": len(want),
                                  "false_positives": len(fired - want),
                                  "missed": len(want - fired)}
    return out


def group_seconds(rulers: list[VmAlert]) -> dict[str, dict[str, float]]:
    """"vmalert<i> <group>" -> evaluations and mean seconds over the run."""
    out = {}
    for i, ruler in enumerate(rulers):
        parts: dict[str, dict[str, float]] = {}
        for line in ruler.metric("vmalert_iteration_duration_seconds"):
            m = ITERATION.match(line)
            if m and (m[1] or 'quantile="1"' in line):
                parts.setdefault(m[2], {})[m[1] or "max"] = float(m[3])
        for group, v in parts.items():
            if v.get("_count"):
                out[f"vmalert{i} {group}"] = {"evaluations": int(v["_count"]),
                                              "mean_s": round(v["_sum"] / v["_count"], 3),
                                              "max_s": round(v.get("max", 0.0), 3)}
    return out


def render(report: dict[str, Any]) -> str:
    k = 1000 / report["gpus"]
    out = [f"{report['gpus']:,} GPUs ({report['nodes']} nodes), {report['minutes']} min live, "
           f"{report['cpus']} CPUs (shared). Targets per member: {report['targets_per_member']}"
           f", scraped by both: {report['scraped_by_both']}, by neither: "
           f"{report['scraped_by_neither']}.", "",
           "| per 1,000 GPUs | measured |", "|---|---|",
           f"| series stored (raw + recorded) | {report['series']['raw'] * k:,.0f} + "
           f"{report['series']['recorded'] * k:,.0f} |",
           f"| samples ingested a second | {report['ingest_per_s'] * k:,.0f} |"]
    for name, mb in report["rss_mb"].items():
        out.append(f"| {name} resident memory, MB | {mb * k:.0f} ({mb:.0f} in all) |")
    out += ["", "| vmalert, group | evaluations | mean s | max s (recent) |", "|---|---|---|---|"]
    out += [f"| {g} | {v['evaluations']} | {v['mean_s']:.3f} | {v['max_s']:.3f} |"
            for g, v in sorted(report["rule_groups"].items())]
    out += ["", "| alert expression | injected | picked | false positives | missed |",
            "|---|---|---|---|---|"]
    out += [f"| {a} | {v['injected']} | {v['fired']} | {v['false_positives']} | "
            f"{v['missed']} |" for a, v in report["verdicts"].items()
            if v["injected"] or v["fired"]]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=12)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fleet-vmsharded"))
    report_options(parser, "fleet-vmsharded.json")
    args = parser.parse_args(argv)
    if rendered(args, render):
        return 0

    shutil.rmtree(args.workdir, ignore_errors=True)
    shard_rules, global_rules = write_shard_rules(args.workdir / "rules", {}, 2)
    plan = fleet.plan(args.nodes, args.gpus)
    report: dict[str, Any] = {"nodes": args.nodes, "gpus": len(plan.gpus),
                              "cpus": os.cpu_count(), "minutes": args.minutes}
    with ExitStack() as stack:
        fleet_ = stack.enter_context(served(plan))
        log(f"{len(plan.nodes)} nodes served")
        vm = VictoriaMetrics(args.workdir / "victoria")
        stack.callback(vm.stop)
        agents: list[VmAgent] = [
            stack.enter_context(vmagent(args.workdir / f"vmagent{i}", vm, fleet_.targets, JOB,
                                        "15s", members=2, member=i)) for i in range(2)]
        rulers: list[VmAlert] = [
            stack.enter_context(vmalert(args.workdir / f"vmalert{i}", vm,
                                        [f, *([global_rules] if i == 0 else [])], "1m",
                                        record=True,
                                        extra_args=("-datasource.queryTimeAlignment=false",)))
            for i, f in enumerate(shard_rules)]
        started = time.time()
        rows0 = None
        while time.time() - started < args.minutes * 60:
            time.sleep(30)
            log(f"{(time.time() - started) / 60:.1f} min; alerts pending or firing "
                f"{sum(len(r.alerts()) for r in rulers)}")
            if rows0 is None and time.time() - started > 120:
                rows0 = (time.time(), _inserted(vm))
        ingest = (_inserted(vm) - rows0[1]) / (time.time() - rows0[0]) if rows0 else 0.0
        report["ingest_per_s"] = round(ingest)
        mine = [a.scraped() for a in agents]
        targets = set(fleet_.targets)
        report["targets_per_member"] = [len(m) for m in mine]
        report["scraped_by_both"] = len(mine[0] & mine[1])
        report["scraped_by_neither"] = len(targets - mine[0] - mine[1])
        counts = {}
        for kind, selector in (("raw", '{__name__=~"goodput_.+"}'),
                               ("recorded", '{__name__=~"goodput:.+"}'),
                               ("all", '{__name__=~".+"}')):
            got = vm.query(f"count({selector})", time.time())
            counts[kind] = int(float(got[0]["value"][1])) if got else 0
        report["series"] = counts
        report["rss_mb"] = {"victoria-metrics": rss_mb(vm),
                            **{f"vmagent{i}": rss_mb(a) for i, a in enumerate(agents)},
                            **{f"vmalert{i}": rss_mb(r) for i, r in enumerate(rulers)}}
        report["rule_groups"] = group_seconds(rulers)
        report["verdicts"] = verdicts(vm, plan)
        log(json.dumps({k: report[k] for k in ("series", "rss_mb", "ingest_per_s")}))
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def _inserted(vm: VictoriaMetrics) -> float:
    """Rows VictoriaMetrics has inserted so far, from its own /metrics."""
    with urllib.request.urlopen(f"{vm.url}/metrics", timeout=30) as resp:
        return sum(float(line.rsplit(" ", 1)[1]) for line in resp.read().decode().splitlines()
                   if line.startswith("vm_rows_inserted_total"))


if __name__ == "__main__":
    raise SystemExit(main())
