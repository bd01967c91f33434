"""The sharded VictoriaMetrics path, for real: a simulated fleet served live on loopback
(bench/fleet/generator.py), scraped by two vmagent members of one scraping cluster
(-promscrape.cluster.membersCount=2, memberNum 0 and 1, each labelling what it writes
shard="<n>") into one VictoriaMetrics; one vmalert per shard loads the rule file the mixin
generates for it (`python -m mixin --shards 2`: the shard groups, reading only
shard="<n>"), and shard 0's also loads the global file, whose groups sum the shards'
pre-aggregates. Next to it one Prometheus scrapes the whole fleet with the shipped files.

- Every target is scraped by exactly one member, and both members scrape.
- The alerts are those of the one Prometheus: the same label sets (the shard label aside).
- The global level's recorded series are the same on both.

Small for CI: 16 nodes of 4 GPUs, scrapes every 5 s, every rule group every 10 s, rate
windows of 2 minutes, alerts with `for: 0s`; bench/fleet/vmsharded.py runs the same path at
4,000 GPUs. The window is what the engines wait on to agree: in a rate's first minutes the
window holds few samples, where Prometheus (extrapolating) and VictoriaMetrics (reading from
the sample before the window) differ most, and a GPU near a threshold fires on one only. With
the shipped 5 minutes that lasted 170 s of the test's 180 s; with 2 minutes, 75 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from typing import Any

import pytest

from bench.fleet import generator as fleet
from bench.fleet.live import (
    JOB,
    Labels,
    Served,
    firing,
    labelset,
    live_prometheus,
    served,
    wait_for,
    write_rules,
    write_shard_rules,
)
from bench.fleet.stack import Prometheus
from mixin.config import load
from mixin.rules import GLOBAL, recording_rules
from testkit.victoria import VictoriaMetrics, VmAgent, VmAlert, vmagent, vmalert

pytestmark = pytest.mark.integration

NODES, GPUS, SHARDS = 16, 4, 2
SCRAPE, INTERVAL, RATE_WINDOW = "5s", "10s", "2m"


def override() -> dict[str, Any]:
    alerts: dict[str, Any] = {name: {"for": "0s"} for name in load().alerts}
    alerts["GPUJobLosingToWaiting"]["thresholds"] = {"min_waiting_share": 0.05}
    return {"windows": {"rate": RATE_WINDOW}, "rule_interval": INTERVAL, "alerts": alerts}


@dataclass
class Sharded:
    fleet: Served
    victoria: VictoriaMetrics
    agents: list[VmAgent]
    rulers: list[VmAlert]
    prometheus: Prometheus

    def vm_alerts(self) -> dict[Labels, dict[str, Any]]:
        out: dict[Labels, dict[str, Any]] = {}
        for ruler in self.rulers:
            out.update(firing(ruler.alerts()))
        return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sharded]:
    workdir = tmp_path_factory.mktemp("vm-sharded")
    cfg = override()
    rules, alerts = write_rules(workdir / "single", cfg)
    shard_files, global_file = write_shard_rules(workdir / "sharded", cfg, SHARDS)
    with ExitStack() as stack:
        served_ = stack.enter_context(served(fleet.plan(NODES, GPUS)))
        vm = VictoriaMetrics(workdir / "victoria", ("-search.latencyOffset=5s",))
        stack.callback(vm.stop)
        agents = [stack.enter_context(vmagent(workdir / f"vmagent{i}", vm, served_.targets, JOB,
                                              SCRAPE, members=SHARDS, member=i))
                  for i in range(SHARDS)]
        rulers = [stack.enter_context(vmalert(
            workdir / f"vmalert{i}", vm, [f, *([global_file] if i == 0 else [])], INTERVAL,
            record=True, extra_args=("-remoteWrite.flushInterval=1s",)))
            for i, f in enumerate(shard_files)]
        prom = stack.enter_context(live_prometheus(workdir / "prometheus", served_.targets,
                                                   [rules, alerts], SCRAPE, INTERVAL))
        st = Sharded(served_, vm, agents, rulers, prom)
        # The straggler is a global alert over the shards' records: the last to come.
        wait_for(lambda: any(dict(k)["alertname"] == "GPUJobStraggler"
                             for k in st.vm_alerts()), 180)
        yield st


def test_every_target_is_scraped_by_exactly_one_member(stack: Sharded) -> None:
    targets = set(stack.fleet.targets)
    mine = [agent.scraped() for agent in stack.agents]
    assert all(mine), f"a member scrapes nothing: {[len(m) for m in mine]}"
    assert not mine[0] & mine[1], f"scraped by both members: {sorted(mine[0] & mine[1])}"
    assert mine[0] | mine[1] == targets
    # What reached VictoriaMetrics: one `up` series per target, written by its member only.
    writers = stack.victoria.query('count by (instance) (group by (instance, shard) (up))',
                                   time.time())
    assert {s["metric"]["instance"] for s in writers} == targets
    assert {float(s["value"][1]) for s in writers} == {1.0}
    for i, own in enumerate(mine):
        got = stack.victoria.query(f'group by (instance) (up{{shard="{i}"}})', time.time())
        assert {s["metric"]["instance"] for s in got} == own


def test_the_alerts_are_those_of_one_prometheus(stack: Sharded) -> None:
    """Polled until equal (each engine evaluates on its own schedule), for up to 3 minutes."""
    seen: dict[str, set[Labels]] = {}
    expected = {"GPUJobStraggler", "GPULost", "GPUBusyButUnproductive"}

    def alike() -> bool:
        """Equal once Prometheus fires what the fleet holds: before its first evaluations
        both engines fire nothing, which is alike too and proves nothing."""
        seen["Prometheus"] = set(firing(stack.prometheus.api("alerts")["alerts"]))
        seen["vmalert"] = set(stack.vm_alerts())
        names = {dict(k)["alertname"] for k in seen["Prometheus"]}
        return expected <= names and seen["Prometheus"] == seen["vmalert"]

    with suppress(TimeoutError):
        wait_for(alike, 180, step=5)
    prom, vm = seen["Prometheus"], seen["vmalert"]
    names = {dict(k)["alertname"] for k in prom}
    assert expected <= names, names
    assert prom == vm, (f"Prometheus only: {sorted(map(sorted, prom - vm))}\n"
                        f"sharded vmalert only: {sorted(map(sorted, vm - prom))}")


def test_the_global_records_are_those_of_one_prometheus(stack: Sharded) -> None:
    """Every global recording rule gives the same series on both (values aside: the engines'
    rate() differ in the last digits)."""
    names = [r["record"] for g in recording_rules(load(override()))["groups"]
             if g["name"].startswith(GLOBAL + ".") for r in g["rules"]]
    differ: list[str] = []

    def alike() -> bool:
        """Polled like the alerts: the global level is recorded from the shards' records,
        an evaluation or two behind them."""
        differ.clear()
        for name in names:
            prom = {labelset(s["metric"]) for s in stack.prometheus.query(name)}
            vm = {labelset(s["metric"]) for s in stack.victoria.query(name, time.time())}
            if prom != vm or not prom:
                differ.append(f"{name}: {len(prom)} series on Prometheus, {len(vm)} sharded")
        return not differ

    with suppress(TimeoutError):
        wait_for(alike, 120, step=5)
    assert not differ, "\n".join(differ)
