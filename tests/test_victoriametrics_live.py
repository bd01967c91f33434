"""The mixin live on Prometheus and on VictoriaMetrics at once: one simulated fleet served on
loopback (bench/fleet/generator.py), scraped by Prometheus and by vmagent into a single-node
VictoriaMetrics; Prometheus records the rules and evaluates the alerts, vmalert does the same
against VictoriaMetrics and writes its records back. Nothing is backfilled: this is what a
user running either engine gets, and where vmalert's chained rules showed (issue 49).

- Alerts fire on time: every alert that fires on both fires on vmalert at most one
  evaluation interval (plus the fixed write and read latency any recorded series has there)
  after Prometheus. vmalert reads a recorded series as of its last write, so each rule an
  alert sits behind made it an evaluation later: GPUJobLosingToWaiting, the fourth rule of a
  chain, fired 3.5 minutes after Prometheus.
- The same alerts fire, with the same labels and the same annotation text (numbers masked:
  the engines' rate() differ in the last digits at a window's edge).
- A dead node's figures go within two minutes on each engine: its exporter stops answering,
  and its per-GPU, per-node and per-namespace series are gone from both.

The intervals run at a third of a production setup's so the test takes minutes: scrapes every
5 s (15 s), every rule group every 20 s (1 m), VictoriaMetrics' -search.latencyOffset 10 s
(30 s) and vmalert's remote-write flush 2 s (5 s); vmalert runs with
-datasource.queryTimeAlignment=false, as docs/scaling.md recommends (aligned, every rule
reads data as of the last interval boundary: up to one more interval old at every hop).
Every alert's `for:` is 0 s, so its activeAt is the first evaluation its condition held;
GPUJobLosingToWaiting's threshold is lowered to 0.02 so the fleet's straggling jobs (0.09 and
0.2 of their time waiting) raise it from their first evaluation on both engines: near the
threshold, the first windows' few samples would decide when it fires, not the rules' hops.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from typing import Any

import pytest

from bench.fleet.live import (
    JOB,
    Labels,
    activated,
    firing,
    live_prometheus,
    served,
    text_shape,
    wait_for,
    write_rules,
)
from mixin import names as N
from mixin.config import load
from testkit.victoria import VictoriaMetrics, vmagent, vmalert
from tests.side_by_side import side_by_side_plan

pytestmark = pytest.mark.integration

SCRAPE = "5s"
INTERVAL = 20  # seconds: every rule group
LATENCY_OFFSET = 10  # VictoriaMetrics' -search.latencyOffset
FLUSH = 2  # vmalert's -remoteWrite.flushInterval
# vmalert writes a record, then VictoriaMetrics shows it once -search.latencyOffset has passed:
# what reading any recorded series costs there, once.
WRITE_READ = FLUSH + LATENCY_OFFSET
# How much longer than on Prometheus an alert may take on vmalert from the moment its first
# recorded input (the rule nearest the counters on its path) exists on that engine: one
# evaluation of its own group, reading what the input's group wrote, and a scrape interval of
# slack for the evaluations' own time and timestamps. Each further rule on the path costs
# vmalert one more evaluation (GPUJobLosingToWaiting was four rules from the counters).
ON_TIME = INTERVAL + WRITE_READ + 5
DEAD_WITHIN = 120  # seconds
# The alerts the simulated fleet raises, checked for time, and the first recorded rule on
# each one's path from the counters (GPULost reads a raw series).
# GPUThermalThrottling is left out: the simulated clock-event counters advance once every
# 75 s, so when its first windows cross the threshold depends on the sample grid, not on hops.
TIMED = {"GPUJobLosingToWaiting": N.NODE_JOB_GPU_SECONDS, "GPUJobStraggler": N.JOB_GPU_WAITING,
         "GPUBusyButUnproductive": N.GPU_UTILIZATION, "GPUAllocatedIdle": N.GPU_UTILIZATION,
         "GPUHostBound": N.GPU_UTILIZATION, "GPULost": "goodput_gpu_up"}
KEYS = ("cluster", "node", "gpu", "job_source", "job_id")  # what an input shares with its alert
# A dead node's figures, per GPU, per node and per namespace on the node.
DEAD_FIGURES = (N.GPU_UTILIZATION, N.REGIME_GPUS, N.NODE_NS_GPUS)


def override() -> dict[str, Any]:
    alerts: dict[str, Any] = {name: {"for": "0s"} for name in load().alerts}
    alerts["GPUJobLosingToWaiting"]["thresholds"] = {"min_waiting_share": 0.02}
    return {"rule_interval": f"{INTERVAL}s", "alerts": alerts}


@dataclass
class Live:
    """What the module's run observed."""

    prometheus: dict[Labels, dict[str, Any]]
    victoria: dict[Labels, dict[str, Any]]
    dead_node: str
    # (alert name, labels) -> engine -> seconds from the alert's first recorded input to it
    after_input: dict[tuple[str, Labels], dict[str, float]] = field(default_factory=dict)
    gone_after: dict[str, float] = field(default_factory=dict)  # engine -> seconds


def _first_sample(samples: list[dict[str, Any]]) -> float | None:
    stamps = [float(v[0]) for s in samples for v in s.get("values", [])]
    return min(stamps) if stamps else None


def _dead_figures(query: Any, node: str) -> bool:
    return not any(query(f'{name}{{node="{node}"}}') for name in DEAD_FIGURES)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("live")
    rules, alerts = write_rules(workdir / "rules", override())
    plan = side_by_side_plan()
    with ExitStack() as stack:
        fleet = stack.enter_context(served(plan))
        vm = VictoriaMetrics(workdir / "victoria", (f"-search.latencyOffset={LATENCY_OFFSET}s",))
        stack.callback(vm.stop)
        stack.enter_context(vmagent(workdir / "vmagent", vm, fleet.targets, JOB, SCRAPE))
        ruler = stack.enter_context(vmalert(
            workdir / "vmalert", vm, [rules, alerts], f"{INTERVAL}s", record=True,
            extra_args=(f"-remoteWrite.flushInterval={FLUSH}s",
                        "-datasource.queryTimeAlignment=false")))
        prom = stack.enter_context(live_prometheus(workdir / "prometheus", fleet.targets,
                                                   [rules, alerts], SCRAPE, f"{INTERVAL}s"))

        def both_fire(name: str) -> bool:
            return (any(k for k in firing(prom.api("alerts")["alerts"])
                        if dict(k)["alertname"] == name)
                    and any(k for k in firing(ruler.alerts()) if dict(k)["alertname"] == name))

        # Rates need two scrapes, then up to four rule hops on vmalert before the fix.
        wait_for(lambda: both_fire("GPUJobLosingToWaiting"), 300)
        # Then until both fire the same: the first windows hold two or three samples, where
        # the engines' rate() differ most, and an alert with `for: 0s` may fire on one a few
        # evaluations before the other.
        now: dict[str, dict[Labels, dict[str, Any]]] = {}

        def alike() -> bool:
            now["Prometheus"] = firing(prom.api("alerts")["alerts"])
            now["VictoriaMetrics"] = firing(ruler.alerts())
            return now["Prometheus"].keys() == now["VictoriaMetrics"].keys()

        # On a timeout, test_the_same_alerts_fire_with_the_same_text names the difference.
        with suppress(TimeoutError):
            wait_for(alike, 240, step=5)
        result = Live(now["Prometheus"], now["VictoriaMetrics"], dead_node=plan.nodes[5])
        ranges = {"Prometheus": lambda expr: prom.query(expr),
                  "VictoriaMetrics": lambda expr: vm.query(expr, time.time())}
        for labels in result.prometheus.keys() & result.victoria.keys():
            name = dict(labels)["alertname"]
            if name not in TIMED:
                continue
            match = ",".join(f'{k}="{v}"' for k, v in sorted(labels) if k in KEYS)
            delays = {}
            for engine, query in ranges.items():
                first = _first_sample(query(f"{TIMED[name]}{{{match}}}[15m]"))
                alert = (result.prometheus if engine == "Prometheus" else result.victoria)[labels]
                if first is not None:
                    delays[engine] = activated(alert["activeAt"]) - first
            result.after_input[(name, labels)] = delays

        # One serving node's exporter dies; its figures must go on both engines.
        fleet.kill(result.dead_node)
        killed = time.monotonic()
        queries = {"Prometheus": lambda expr: prom.query(expr),
                   "VictoriaMetrics": lambda expr: vm.query(expr, time.time())}
        while len(result.gone_after) < 2 and time.monotonic() - killed < 2 * DEAD_WITHIN:
            for engine, query in queries.items():
                if engine not in result.gone_after and _dead_figures(query, result.dead_node):
                    result.gone_after[engine] = round(time.monotonic() - killed, 1)
            time.sleep(2)
        yield result


def _by_alert(alerts: dict[Labels, dict[str, Any]], name: str) -> dict[Labels, dict[str, Any]]:
    return {k: v for k, v in alerts.items() if dict(k)["alertname"] == name}


def test_alerts_fire_on_time_on_vmalert(live: Live) -> None:
    """GPUJobLosingToWaiting, the straggler and the per-GPU faults fire on vmalert within one
    evaluation of when they fire on Prometheus, each counted from the moment its first
    recorded input exists on that engine: each engine schedules its groups at its own phase
    and VictoriaMetrics shows raw samples -search.latencyOffset late, which no rule can
    change; every further rule between the input and the alert costs vmalert an evaluation."""
    late, compared = [], 0
    for (name, labels), delays in sorted(live.after_input.items(), key=str):
        assert len(delays) == 2, f"{name}: {TIMED[name]} found only on {sorted(delays)}"
        lag = delays["VictoriaMetrics"] - delays["Prometheus"]
        compared += 1
        where = dict(labels).get("job_id") or f"{dict(labels)['node']}/{dict(labels)['gpu']}"
        print(f"{name} {where}: {lag:+.0f} s on vmalert ({delays})")
        if lag > ON_TIME:
            late.append(f"{name} {where}: {lag:.0f} s later than on Prometheus")
    assert any(name == "GPUJobLosingToWaiting" for name, _ in live.after_input), "none compared"
    assert compared
    assert not late, f"more than {ON_TIME} s later on vmalert:\n" + "\n".join(late)


def test_the_same_alerts_fire_with_the_same_text(live: Live) -> None:
    """Same label sets on both; each one's summary and description read the same."""
    prom, vm = live.prometheus, live.victoria
    assert prom.keys() == vm.keys(), (
        f"Prometheus only: {sorted(dict(k)['alertname'] for k in prom.keys() - vm.keys())}; "
        f"VictoriaMetrics only: {sorted(dict(k)['alertname'] for k in vm.keys() - prom.keys())}")
    differ = []
    for labels in prom:
        for key in ("summary", "description"):
            a = text_shape(prom[labels]["annotations"].get(key, ""))
            b = text_shape(vm[labels]["annotations"].get(key, ""))
            if a != b:
                differ.append(f"{dict(labels)['alertname']} {key}:\n  {a}\n  {b}")
    assert not differ, "\n".join(differ)


@pytest.mark.parametrize("engine", ["Prometheus", "VictoriaMetrics"])
def test_a_dead_node_drops_within_two_minutes(live: Live, engine: str) -> None:
    """Its per-GPU utilization, its regime counts and its per-namespace sums are gone."""
    gone = live.gone_after.get(engine)
    assert gone is not None and gone <= DEAD_WITHIN, (
        f"{live.dead_node}'s figures on {engine}: "
        f"{'still there' if gone is None else f'gone after {gone} s'}")
