"""One Prometheus scraping a simulated fleet live, before and after issue 49 in one run: what
a GPU costs it in memory, series, samples ingested and rule time.

    python -m bench.fleet.promlive --nodes 125 --report docs/validation/fleet/promlive-1000.json

Each side serves bench/fleet/generator.py's fleet on loopback (one /metrics per node) and
starts a fresh Prometheus scraping every node every 15 s with that side's rule files loaded:
"before" is the rules of main before this issue over the fleet as that exporter published it
(all nine regime counters on every GPU, bench/fleet/rulecost.legacy_exporter), "after" this
tree's. After ``--minutes`` (long enough for every 5-minute window to fill and every group to
run several times) it reads Prometheus's resident memory, head series, samples appended a
second and each rule group's last evaluation times. A head a few minutes old holds fewer
chunks than one hours old: memory grows with the head's age up to its 2 h block, so the
figure is a floor, for both sides alike.
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
from bench.fleet.live import scrape_config, served
from bench.fleet.rulecost import BEFORE_REV, legacy_exporter, rule_sets
from bench.fleet.stack import Prometheus, log, prometheus, rendered, report_options, watch_groups
from testkit.harness import proc_rss_bytes


def _own(prom: Prometheus, name: str) -> float:
    """One of Prometheus's own metrics, from its /metrics (it does not scrape itself here)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in prom.metric(name)
               if line[len(name)] in " {")


def side(args: argparse.Namespace, name: str, groups: list[dict[str, Any]],
         traces: fleet.Traces, plan: fleet.Fleet) -> dict[str, Any]:
    workdir = args.workdir / name
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    rules = workdir / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    with served(plan, traces) as fleet_:
        config = {"global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
                  "rule_files": [str(rules)],
                  "scrape_configs": [scrape_config(fleet_.targets, "15s")]}
        with prometheus(workdir, config) as prom:
            started = time.time()
            while time.time() - started < args.minutes * 60:
                time.sleep(30)
                log(f"{name}: {(time.time() - started) / 60:.1f} min, head series "
                    f"{_own(prom, 'prometheus_tsdb_head_series'):,.0f}")
            appended = _own(prom, "prometheus_tsdb_head_samples_appended_total")
            time.sleep(60)
            appended = _own(prom, "prometheus_tsdb_head_samples_appended_total") - appended
            groups_s = watch_groups({name: prom}, 1, 5, log=lambda _m: None)
            gpus = len(plan.gpus)
            out = {
                "rss_mb": round(proc_rss_bytes(prom.process.pid).get("VmRSS", 0) / 2**20, 1),
                "head_series": int(_own(prom, "prometheus_tsdb_head_series")),
                "samples_per_s": round(appended / 60),
                "rule_group_last_s": {k.split(" ", 1)[1]: v["later_max_s"]
                                      for k, v in groups_s.items()},
                "up": int(float(prom.query("sum(up)")[0]["value"][1])), "gpus": gpus}
    shutil.rmtree(workdir, ignore_errors=True)
    return out


def render(report: dict[str, Any]) -> str:
    k = 1000 / report["gpus"]
    b, a = report["before"], report["after"]
    out = [f"{report['gpus']:,} GPUs ({report['nodes']} nodes) scraped live every 15 s by one "
           f"Prometheus, {report['minutes']:g} min per side, {report['cpus']} CPUs (shared).",
           "", "| per 1,000 GPUs | before | after |", "|---|---|---|",
           f"| resident memory, MB (a head {report['minutes']:g} min old) | "
           f"{b['rss_mb'] * k:,.0f} | {a['rss_mb'] * k:,.0f} |",
           f"| head series | {b['head_series'] * k:,.0f} | {a['head_series'] * k:,.0f} |"]
    if b["samples_per_s"] and a["samples_per_s"]:
        out.append(f"| samples appended a second | {b['samples_per_s'] * k:,.0f} | "
                   f"{a['samples_per_s'] * k:,.0f} |")
    # Each group's last duration is one sample under whatever else ran at that moment: the
    # JSON keeps it; bench/fleet/rulecost.py measures rule time rule by rule.
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=6)
    parser.add_argument("--before-rev", default=BEFORE_REV)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fleet-promlive"))
    report_options(parser, "fleet-promlive.json")
    args = parser.parse_args(argv)
    if rendered(args, render):
        return 0
    sets = rule_sets(args.before_rev)
    plan = fleet.plan(args.nodes, args.gpus)
    traces = fleet.record_archetypes()
    report: dict[str, Any] = {"nodes": args.nodes, "gpus": len(plan.gpus),
                              "cpus": os.cpu_count(), "minutes": args.minutes,
                              "before_rev": args.before_rev}
    for name, side_traces in (("before", legacy_exporter(traces)), ("after", traces)):
        report[name] = side(args, name, sets[name], side_traces, plan)
        log(f"{name}: {report[name]}")
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
