"""What the rules and dashboards cost on one real Prometheus holding a whole simulated fleet.

    python -m bench.fleet.measure --nodes 125 --report /tmp/fleet-1000.json   # 1,000 GPUs, 24 h

Backfills ``--hours`` of history (the last ``--fine-hours`` at 15 s, older hours coarser) and
every recording rule, the history running ``--lead`` seconds past the start so that it is
still current once written, then starts Prometheus with every rule group and alert loaded,
so the groups evaluate live on current data. (Prometheus does not store a live result inside
the backfilled blocks' range; what the panels read there is the backfill's, computed by
promtool from the same rules. The evaluation itself, which is what costs, runs live.) Measures:
each panel query of the three dashboards at the default range (3 h) and at 24 h through the
HTTP API with stats=all (latency p50/p95 over ``--reps`` runs, samples touched), each group's
prometheus_rule_group_last_duration_seconds, series per GPU (raw, recorded, engines') and
TSDB bytes per GPU-day at 15 s. One Prometheus holding every node is the worst case of a
shard (a shard holds 1/n of it) and of the global level (which holds only recorded series).
Writes a JSON report (--report); docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from bench.fleet import generator as fleet
from bench.fleet.stack import (
    ALERTS,
    RULES,
    backfill_rules,
    log,
    prometheus,
    rendered,
    report_options,
    watch_groups,
)

REPO = Path(__file__).resolve().parents[2]

BOARDS = sorted((REPO / "dashboards").glob("goodput-*.json"))
RANGES = {"default": (3 * 3600, 15), "24h": (24 * 3600, 90)}  # seconds, Grafana's step


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def panel_targets(board: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(panel title, expr, instant) of every query of a dashboard, rows opened."""
    out = []
    for panel in board.get("panels", []):
        for p in (panel, *panel.get("panels", [])):
            for t in p.get("targets", []):
                out.append((p["title"], t["expr"], bool(t.get("instant"))))
    return out


def substitute(expr: str, range_s: int, step: int, chosen: dict[str, str] | None = None) -> str:
    """Grafana's substitutions: the variables in ``chosen`` (those without All, at the value
    Grafana opens on), every other variable All."""
    rate_interval = max(4 * 15, step + 15)
    for name, value in (("$__rate_interval", f"{rate_interval}s"), ("$__interval", f"{step}s"),
                        ("$__range_s", str(range_s)), ("$__range", f"{range_s}s")):
        expr = expr.replace(name, value)
    for name, value in (chosen or {}).items():
        # Grafana escapes regex characters in the value; in a PromQL string, a doubled \.
        escaped = re.sub(r"([.^$|?*+()\[\]{}])", r"\\\\\1", value)
        expr = re.sub(rf"\$\{{{name}\}}|\${name}\b", escaped.replace("\\", "\\\\"), expr)
    return re.sub(r"\$\{?(?!__)(\w+)\}?", ".*", expr)


def opening_values(url: str, board: dict[str, Any], at: float, range_s: int) -> dict[str, str]:
    """What Grafana opens a board on for each variable that has no All: the first value of
    its label_values() query, sorted as the variable sorts (alphabetically)."""
    chosen: dict[str, str] = {}
    for var in board["templating"]["list"]:
        if var.get("type") != "query" or var.get("includeAll"):
            continue
        m = re.fullmatch(r"label_values\((.+), *(\w+)\)", var["query"]["query"], re.S)
        if not m:
            raise ValueError(f"{var['name']}: cannot read {var['query']['query']!r}")
        params = urllib.parse.urlencode({"match[]": substitute(m[1], range_s, 15, chosen),
                                         "start": f"{at - range_s:.0f}", "end": f"{at:.0f}"})
        with urllib.request.urlopen(f"{url}/api/v1/label/{m[2]}/values?{params}",
                                    timeout=300) as resp:
            values = sorted(json.load(resp)["data"])
        if values:
            chosen[var["name"]] = values[0]
    return chosen


def timed_query(url: str, expr: str, at: float, range_s: int, step: int,
                instant: bool) -> tuple[float, int, int]:
    """(seconds, samples touched, series returned) of one query as Grafana would send it."""
    if instant:
        params = {"query": expr, "time": f"{at:.3f}", "stats": "all"}
        path = "query"
    else:
        params = {"query": expr, "start": f"{at - range_s:.3f}", "end": f"{at:.3f}",
                  "step": str(step), "stats": "all"}
        path = "query_range"
    t = time.monotonic()
    with urllib.request.urlopen(f"{url}/api/v1/{path}?{urllib.parse.urlencode(params)}",
                                timeout=300) as resp:
        body = json.load(resp)
    elapsed = time.monotonic() - t
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    samples = body["data"].get("stats", {}).get("samples", {}).get("totalQueryableSamples", 0)
    return elapsed, int(samples), len(body["data"]["result"])


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def render(report: dict[str, Any]) -> str:
    """The report as the markdown tables of docs/benchmarks.md."""
    out = [f"{report['gpus']:,} GPUs ({report['nodes']} nodes), {report['hours']:g} h of "
           f"history (last {report['fine_hours']:g} h at 15 s, older at "
           f"{report.get('coarse_step_s', 60)} s, rules there every "
           f"{report.get('coarse_rule_interval', '1m')}), "
           f"{report['cpus']} CPUs.", "",
           "| rule group | evaluations | first s | later: median / max s |", "|---|---|---|---|"]
    out += [f"| {k.split(' ', 1)[1]} | {g['evaluations']} | {g['first_s']:.3f} | "
            f"{g['later_median_s']:.3f} / {g['later_max_s']:.3f} |"
            for k, g in sorted(report["rule_groups"].items())]
    per = report["series_per_gpu"]
    out += ["", f"Series per GPU: {per['raw']} exporter + {per['recorded']} recorded = "
            f"{per['raw'] + per['recorded']:.1f}; with the engines' own TTFT histograms "
            f"{per['all']}. TSDB bytes per GPU-day: {report['raw_bytes_per_gpu_day_15s']:,} raw "
            f"(15 s) + {report['rule_bytes_per_gpu_day_1m']:,} recorded (1 m).", "",
            "| board | panel | default p50 / p95 s | samples | 24 h p50 / p95 s | samples |",
            "|---|---|---|---|---|---|"]
    for p in report["panels"]:
        d, w = p["default"], p["24h"]
        out.append(f"| {p['board']} | {p['panel']} | {d['p50_s']:.3f} / {d['p95_s']:.3f} | "
                   f"{d['samples']:,} | {w['p50_s']:.3f} / {w['p95_s']:.3f} | "
                   f"{w['samples']:,} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--fine-hours", type=float, default=3.0)
    parser.add_argument("--coarse-stride", type=int, default=4,
                        help="older hours keep every n-th 15 s sample (4: 60 s)")
    parser.add_argument("--coarse-rule-interval", default="1m",
                        help="rule evaluation interval backfilled over the older hours")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--lead", type=float, default=1800,
                        help="seconds of history past the start: more than the run takes")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fleet-bench"))
    parser.add_argument("--keep", action="store_true", help="keep the TSDB afterwards")
    parser.add_argument("--extended-metrics", action="store_true")
    report_options(parser, "fleet-report.json")
    args = parser.parse_args(argv)
    if rendered(args, render):
        return 0

    shutil.rmtree(args.workdir, ignore_errors=True)
    data = args.workdir / "data"
    data.mkdir(parents=True)
    scratch = args.workdir / "scratch"
    scratch.mkdir()
    report: dict[str, Any] = {"nodes": args.nodes, "gpus": args.nodes * args.gpus,
                              "hours": args.hours, "fine_hours": args.fine_hours,
                              "coarse_step_s": args.coarse_stride * fleet.STEP,
                              "coarse_rule_interval": args.coarse_rule_interval,
                              "cpus": os.cpu_count(), "extended_metrics": args.extended_metrics}
    plan = fleet.plan(args.nodes, args.gpus)
    t = time.monotonic()
    replay = fleet.Replay(plan, fleet.record_archetypes(args.extended_metrics))
    log(f"archetypes {time.monotonic() - t:.1f} s")
    started = time.time()
    end = float(int(started + args.lead))
    lead_h = args.lead / 3600
    hours, fine_hours = args.hours + lead_h, args.fine_hours + lead_h
    gpus = len(plan.gpus)

    # Raw history: coarse hours, then the fine ones, measuring the fine hours' bytes.
    t = time.monotonic()
    coarse = hours - fine_hours
    samples = 0
    if coarse > 0:
        samples += fleet.backfill_raw(
            replay, plan.nodes, data, scratch, end - fine_hours * 3600, coarse, 0.0,
            log=log, end_step=fleet.ORIGIN - int(fine_hours * 3600 / fleet.STEP),
            include_end=False, coarse_stride=args.coarse_stride)
    before = du(data)
    samples += fleet.backfill_raw(replay, plan.nodes, data, scratch, end, fine_hours,
                                  fine_hours, log=log)
    fine_bytes = du(data) - before
    report["raw_samples"] = samples
    report["raw_backfill_s"] = round(time.monotonic() - t, 1)
    report["raw_bytes_per_gpu_day_15s"] = round(fine_bytes / gpus / fine_hours * 24)

    # Recording rules over the whole history, a dependency level per pass: the older hours at
    # --coarse-rule-interval, the fine ones at the groups' own interval (measuring their bytes).
    rule_groups = yaml.safe_load(RULES.read_text())["groups"]
    t = time.monotonic()
    fine_start = end - fine_hours * 3600
    if coarse > 0:
        backfill_rules(args.workdir, rule_groups, end - hours * 3600 + 600, fine_start,
                       log=log, interval=args.coarse_rule_interval)
    before = du(data)
    backfill_rules(args.workdir, rule_groups, fine_start + (600 if coarse <= 0 else 0), end,
                   log=log)
    report["rules_backfill_s"] = round(time.monotonic() - t, 1)
    report["rule_bytes_per_gpu_day_1m"] = round((du(data) - before) / gpus / fine_hours * 24)
    shutil.rmtree(scratch)
    report["tsdb_bytes"] = du(data)
    left = end - time.time()
    log(f"TSDB {report['tsdb_bytes'] / 1e9:.2f} GB; data runs {left:.0f} s past now")
    if left < 900:
        raise SystemExit(f"--lead {args.lead:g} s was too short: the history ends in {left:.0f} s")

    all_groups = rule_groups + yaml.safe_load(ALERTS.read_text())["groups"]
    with prometheus(args.workdir, {"scrape_configs": []}, all_groups) as prom:
        # Each group evaluates once a minute: watch three rounds of every group.
        report["rule_groups"] = watch_groups({"single": prom}, 3, 420)
        # Measure now: the groups have evaluated live and the raw data is current.
        at = float(int(time.time()))
        report["measured_at_minus_data_end_s"] = at - end

        counts = {}
        for kind, selector in (("raw", '{__name__=~"goodput_.+"}'),
                               ("recorded", '{__name__=~"goodput:.+"}'),
                               ("engines", '{__name__=~"vllm:.+"}'),
                               ("all", '{__name__=~".+"}')):
            result = prom.query(f"count({selector})", at=at)
            counts[kind] = int(float(result[0]["value"][1])) if result else 0
        report["series"] = counts
        report["series_per_gpu"] = {k: round(v / gpus, 1) for k, v in counts.items()}
        log(f"series per GPU: {report['series_per_gpu']}")

        panels = []
        for board_path in BOARDS:
            board = json.loads(board_path.read_text())
            opened = {name: opening_values(prom.url, board, at, range_s)
                      for name, (range_s, _) in RANGES.items()}
            report.setdefault("opened_on", {})[board_path.stem] = opened["default"]
            for title, expr, instant in panel_targets(board):
                row: dict[str, Any] = {"board": board_path.stem.removeprefix("goodput-"),
                                       "panel": title, "instant": instant}
                for name, (range_s, step) in RANGES.items():
                    q = substitute(expr, range_s, step, opened[name])
                    runs = [timed_query(prom.url, q, at, range_s, step, instant)
                            for _ in range(args.reps)]
                    lat = [r[0] for r in runs]
                    row[name] = {"p50_s": round(statistics.median(lat), 3),
                                 "p95_s": round(pct(lat, 0.95), 3),
                                 "samples": runs[0][1], "series": runs[0][2]}
                panels.append(row)
                log(f"{row['board']} / {title}: {row['default']} / {row['24h']}")
        report["panels"] = panels
    if not args.keep:
        shutil.rmtree(args.workdir)
    args.report.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
