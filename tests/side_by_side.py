"""The same fleet history in a real Prometheus and a real VictoriaMetrics, each with the shipped
recording rules computed by its own ruler and the shipped alerts evaluated by its own live
ruler (Prometheus; vmalert), for tests/test_victoriametrics.py.

The fleet is bench/fleet/generator.py's, twice: once without a `cluster` label (the default
single-cluster setup) and once with `cluster="c2"`, same node names, in one store, as a global
ruler sees them. Each half has every fault the generator injects, two multi-node training jobs
with a straggler (one known by Kubernetes, one by Slurm), and three scenarios of its own:

- an XID that happens while the node is monitored (a new counter series at 1): must page;
- a node whose exporter started 8 minutes before t0 with an XID counter already at 1 (an
  error from before monitoring started): must not page, on either engine;
- a node whose exporter is down since 35 minutes before t0 (`up` 0, its series gone).

History runs from HISTORY before t0 to LEAD after it, scraped every 30 s, so both live rulers
evaluate on present data (the future part of the history) while the test reads both stores at
t0. Recording rules are computed over the history, a dependency level per pass (testkit/
rules.levels): `promtool tsdb create-blocks-from rules` on Prometheus, vmalert's replay mode on
VictoriaMetrics. `up` carries the node label here: a backfill cannot evaluate
goodput:exporter_node:info reading its own last value, which is what keeps a down exporter's
node label live.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.fleet import generator as fleet
from bench.fleet.stack import Prometheus, backfill_rules, prometheus
from testkit.rules import levels
from testkit.victoria import VictoriaMetrics, VmAlert, replay, victoria_metrics, vmalert
from tests.support.prometheus import require

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "alerts" / "goodput.rules.yml"
ALERTS = REPO / "alerts" / "goodput_alerts.rules.yml"

CLUSTERS = ("", "c2")  # no cluster label, and one
GPUS_PER_NODE = 4
STRIDE = 2  # a sample every 2 x 15 s
HISTORY = 52 * 60  # the longest `for` of a fault alert (30 m), its 5 m rates, a 10 m offset
LEAD = 10 * 60  # data past t0 the live rulers evaluate on
RULE_INTERVAL = 60
LATE, DOWN = "gpu-node-late", "gpu-node-down"
# Before t0. The exporter is down long enough for every recorded series of its node to be
# gone on both engines: a backfill writes no staleness markers, so on Prometheus each level of
# chained rules outlives its input by the 5 minute lookback.
LATE_FOR, DOWN_FOR, XID_FOR = 8 * 60, 35 * 60, 4 * 60
# How long after t0 the live rulers still see the scenarios as at t0 (the monitored XID
# leaves its 10 minute window 6 minutes after t0).
SCENARIOS_HOLD = 5 * 60
NODE_LABEL = re.compile(r'node="([^"]+)"')


def side_by_side_plan() -> fleet.Fleet:
    """Eight nodes of four GPUs: the generator's faults on the serving half, two training jobs
    of two nodes each with a straggler - Kubernetes (job 9) and Slurm (job 1) - and the idle
    nodes of the late and the down exporter."""
    plan = fleet.plan(8, GPUS_PER_NODE)
    per_node = plan.by_node()
    training = plan.nodes[:4]
    for n in training:
        for g in per_node[n]:
            g.archetype, g.job, g.namespace, g.pod, g.job_name = "idle", ("", "", ""), "", "", ""
            g.sm_scale, g.wait_rate = 1.0, 0.0
    plan.stragglers.clear()
    plan.balanced_jobs.clear()
    plan.straggler_jobs.clear()
    rng = random.Random(40)
    for job, nodes in ((9, training[:2]), (1, training[2:])):
        fleet._train(plan, job, [per_node[n] for n in nodes], rng.randrange(fleet.TRACE_STEPS),
                     rng)
    assert {j[0] for j in plan.straggler_jobs} == {"kubernetes", "slurm"}, plan.straggler_jobs
    for node in (LATE, DOWN):
        plan.nodes.append(node)
        plan.gpus.extend(fleet.Gpu(node, i, "idle", 0) for i in range(GPUS_PER_NODE))
    return plan


def xid_node(plan: fleet.Fleet) -> tuple[str, str]:
    """The (node, gpu) that gets an XID while monitored: a serving node's free last GPU."""
    return plan.nodes[4], str(GPUS_PER_NODE - 1)


@dataclass
class Feed:
    """The OpenMetrics files both engines import, and the times they span."""

    t0: float
    start: float
    end: float
    files: list[Path] = field(default_factory=list)


def _keep(line: str, start: float) -> bool:
    """Whether a sample line survives the late and the down exporter's scenarios."""
    match = NODE_LABEL.search(line)
    if match is None or match[1] not in (LATE, DOWN):
        return True
    stamp = float(line.rsplit(" ", 1)[1])
    return stamp >= start - LATE_FOR if match[1] == LATE else stamp <= start - DOWN_FOR


def _with_cluster(line: str, cluster: str) -> str:
    return line.replace("{", f'{{cluster="{cluster}",', 1) if cluster else line


def write_feed(workdir: Path, t0: float, plan: fleet.Fleet) -> Feed:
    steps = (HISTORY + LEAD) // (fleet.STEP * STRIDE) + 1
    start = t0 - HISTORY
    feed = Feed(t0, start, start + (steps - 1) * fleet.STEP * STRIDE)
    replay_ = fleet.Replay(plan, fleet.record_archetypes())
    raw = workdir / "fleet.om"
    fleet.write_openmetrics(replay_, plan.nodes, raw, start, fleet.ORIGIN - int(steps) * STRIDE,
                            int(steps), STRIDE)
    stamps = [start + k * fleet.STEP * STRIDE for k in range(int(steps))]
    for cluster in CLUSTERS:
        out = workdir / f"fleet-{cluster or 'nocluster'}.om"
        with raw.open() as src, out.open("w", buffering=1 << 20) as dst:
            for line in src:
                if line.startswith("#"):
                    dst.write(line)
                elif _keep(line, t0):
                    dst.write(_with_cluster(line, cluster))
        feed.files.append(out)
        feed.files.append(_scenarios(workdir, cluster, plan, t0, stamps))
    raw.unlink()
    return feed


def _scenarios(workdir: Path, cluster: str, plan: fleet.Fleet, t0: float,
               stamps: list[float]) -> Path:
    """`up` of every target, the XID while monitored and the late node's old XID."""
    out = workdir / f"scenarios-{cluster or 'nocluster'}.om"
    target = 'instance="{node}:9433",job="gpu-goodput-exporter",node="{node}"'
    lines = ["# TYPE up gauge\n"]
    for node in plan.nodes:
        labels = target.format(node=node)
        for t in stamps:
            if node == LATE and t < t0 - LATE_FOR:
                continue
            value = 0 if node == DOWN and t > t0 - DOWN_FOR else 1
            lines.append(_with_cluster(f"up{{{labels}}} {value} {t:.3f}\n", cluster))
    lines.append("# TYPE goodput_gpu_xid_errors counter\n")
    node, gpu = xid_node(plan)
    for (n, g), since in (((node, gpu), XID_FOR), ((LATE, "0"), LATE_FOR)):
        labels = f'gpu="{g}",{target.format(node=n)},xid="79"'
        for t in stamps:
            if t >= t0 - since:
                # The monitored XID repeats two minutes later; the old one never does.
                value = 2 if n != LATE and t >= t0 - since + 120 else 1
                lines.append(_with_cluster(
                    f"goodput_gpu_xid_errors_total{{{labels}}} {value} {t:.3f}\n", cluster))
    lines.append("# EOF\n")
    out.write_text("".join(lines))
    return out


def recording_levels(path: Path = RULES) -> list[list[dict[str, Any]]]:
    rules = [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]
             if "record" in r]
    return levels(rules)


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed: {result.stdout}{result.stderr}")


def build_prometheus(workdir: Path, feed: Feed, rules: Path) -> None:
    """Raw history and recording rules into workdir/data."""
    promtool = require("promtool")
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    for f in feed.files:
        _run(promtool, "tsdb", "create-blocks-from", "openmetrics", str(f), str(data))
    groups = yaml.safe_load(rules.read_text())["groups"]
    backfill_rules(workdir, [g for g in groups if any("record" in r for r in g["rules"])],
                   rule_start(feed), feed.end, log=lambda _m: None, interval="1m")


def rule_start(feed: Feed) -> float:
    """Where the recording rules start: aligned to the minute, 10 minutes of raw history
    behind (the XID rule's offset)."""
    return (feed.start + 600) // RULE_INTERVAL * RULE_INTERVAL + RULE_INTERVAL


def build_victoria(vm: VictoriaMetrics, workdir: Path, feed: Feed, rules: Path) -> None:
    for f in feed.files:
        vm.import_openmetrics(f)
    vm.flush()
    for i, level in enumerate(recording_levels(rules)):
        rule_file = workdir / f"vm-level{i}.rules.yml"
        rule_file.write_text(yaml.safe_dump(
            {"groups": [{"name": f"level{i}", "interval": "1m", "rules": level}]}))
        replay(vm, rule_file, rule_start(feed), feed.end, workdir / "vmalert-replay.log")


@dataclass
class Engines:
    prometheus: Prometheus
    victoria: VictoriaMetrics
    vmalert: VmAlert
    plan: fleet.Fleet
    feed: Feed
    alerts: Path
    rules: Path
    build_s: float


@contextmanager
def engines(workdir: Path, rules: Path = RULES, alerts: Path = ALERTS,
            lead_s: float = -15) -> Iterator[Engines]:
    """Both engines loaded and their live rulers running, at or after t0 + 35 s (past
    VictoriaMetrics' -search.latencyOffset, so a query at t0 sees every sample).

    t0 sits 15 s past a minute: the rules evaluate on the minute, halfway between two
    samples, so every run compares the engines at the same point of the sample grid (where a
    rate window's edge falls decides how far apart the engines' rates are). It is the last
    such point at or before now + ``lead_s`` (default: 15 to 75 s ago), so building both
    stores (half a minute or more) is the 35 s wait: t0 ahead of the start (lead 45 s)
    made the fixture sleep ~33 s after an idle build of 52 s. What is left is each live
    ruler's first evaluation of the shipped one-minute groups (vmalert and Prometheus spread
    them over the interval: 5-55 s after start measured). The scenarios hold until t0 + 5
    min, so the build may take up to 3:45."""
    began = time.monotonic()
    t0 = float(int(time.time() + lead_s - 15) // 60 * 60 + 15)
    plan = side_by_side_plan()
    feed = write_feed(workdir, t0, plan)
    build_prometheus(workdir / "prometheus", feed, rules)
    with ExitStack() as stack:
        vm = stack.enter_context(victoria_metrics(workdir / "victoria"))
        build_victoria(vm, workdir / "victoria", feed, rules)
        for f in feed.files:
            f.unlink()
        prom = stack.enter_context(prometheus(
            workdir / "prometheus",
            {"global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
             # The ruler writes ALERTS at the present, which the history already covers.
             "storage": {"tsdb": {"out_of_order_time_window": "1h"}},
             "rule_files": [str(alerts)], "scrape_configs": []}))
        ruler = stack.enter_context(vmalert(workdir / "vmalert", vm, [alerts]))
        build_s = time.monotonic() - began
        if time.time() > t0 + SCENARIOS_HOLD:
            raise RuntimeError(f"building both stores took {build_s:.0f} s: the scenarios "
                               "around t0 no longer hold; raise lead_s")
        time.sleep(max(0.0, t0 + 35 - time.time()))
        ruler.wait_evaluated()
        _wait_prometheus_evaluated(prom)
        yield Engines(prom, vm, ruler, plan, feed, alerts, rules, build_s)
    shutil.rmtree(workdir, ignore_errors=True)


def _wait_prometheus_evaluated(prom: Prometheus, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
        if rules and all(r.get("lastEvaluation", "").startswith("2") for r in rules):
            return
        if time.monotonic() > deadline:
            raise TimeoutError("Prometheus has not evaluated every alert")
        time.sleep(0.5)
