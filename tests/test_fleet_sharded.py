"""A 20-node fleet (bench/fleet/generator.py) on two hashmod shards and a global Prometheus
reading them through /federate, all real servers: every alert picks exactly the injected GPUs, the
straggler rule names the slow rank of every straggling job and no balanced job, and every
dashboard query has data on the Prometheus that serves it.

The 8,000-GPU version of this is a benchmark (bench/fleet/measure.py, docs/benchmarks.md).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.fleet import generator as fleet
from bench.fleet.stack import (
    ALERTS,
    FEDERATED_RAW,
    GLOBAL_PREFIX,
    RULES,
    SHARD_PREFIX,
    Prometheus,
    Stack,
    groups,
    sharded,
)
from mixin.config import load as load_config
from mixin.names import JOB_STRAGGLER, JOB_WAITING, JOB_WAITING_GPUS
from tests.test_dashboards import BOARDS, load, substitute, targets

pytestmark = pytest.mark.integration

NODES = 20


@pytest.fixture(scope="module")
def plan() -> fleet.Fleet:
    return fleet.plan(NODES)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory,
          plan: fleet.Fleet) -> Iterator[tuple[Stack, float]]:
    replay = fleet.Replay(plan, fleet.record_archetypes(extended=True))
    end = float(int(time.time()))
    with sharded(tmp_path_factory.mktemp("fleet"), replay, end, interval="2s",
                 log=lambda _m: None) as st:
        # The global groups compute once the first /federate scrape has landed; each group
        # runs on its own schedule: wait for the last rule of each, then one more round.
        last = [g["rules"][-1]["record"] for g in groups(RULES, GLOBAL_PREFIX)]
        deadline = time.monotonic() + 120  # a loaded CI machine
        while not all(st.global_.query(name) for name in last):
            assert time.monotonic() < deadline, "the global rules never computed"
            time.sleep(0.5)
        time.sleep(4)
        yield st, end


def _alerts() -> list[tuple[str, dict[str, Any]]]:
    return [(g["name"], r) for g in yaml.safe_load(ALERTS.read_text())["groups"]
            for r in g["rules"]]


def _gpus(result: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(s["metric"].get("node", ""), s["metric"].get("gpu", "")) for s in result}


def test_every_group_is_shard_or_global() -> None:
    for path in (RULES, ALERTS):
        for group in yaml.safe_load(path.read_text())["groups"]:
            assert group["name"].startswith((SHARD_PREFIX, GLOBAL_PREFIX)), group["name"]


def test_each_shard_holds_exactly_its_hashmod_nodes(stack: tuple[Stack, float]) -> None:
    st, end = stack
    for s, shard in enumerate(st.shards):
        nodes = {r["metric"]["node"] for r in shard.query(
            "group by (node) (goodput_gpu_info)", at=end)}
        assert nodes == {n for n, owner in st.owner.items() if owner == s}
    assert len(set(st.owner.values())) == 2, "20 nodes should land on both shards"


@pytest.mark.parametrize("group, rule", _alerts(), ids=lambda x: x if isinstance(x, str)
                         else x["alert"])
def test_alert_fires_for_exactly_the_injected_gpus(stack: tuple[Stack, float], plan: fleet.Fleet,
                                                   group: str, rule: dict[str, Any]) -> None:
    """Shard alerts are evaluated on every shard (each sees its own nodes), global ones on
    the global Prometheus; `for:` aside, the set is the one the plan injected."""
    st, end = stack
    if group.startswith(GLOBAL_PREFIX):
        fired = _gpus(st.global_.query(rule["expr"]))
    else:
        fired = set().union(*(_gpus(s.query(rule["expr"], at=end)) for s in st.shards))
    assert fired == fleet.expected_alerts(plan).get(rule["alert"], set())


def test_straggler_rule_names_every_straggler_and_no_balanced_job(
        stack: tuple[Stack, float], plan: fleet.Fleet) -> None:
    """Jobs known by Kubernetes, Slurm or a process tree alike (goodput_gpu_job_info): every
    mild straggler (10 or 25 % more work per step) is named from its peers' waiting shares,
    on whichever nodes and shards they sit; a balanced job, whose ranks never wait, records
    no candidate at all."""
    st, _ = stack
    threshold = load_config().alerts["GPUJobStraggler"].thresholds["min_waiting_gap"]
    gaps = {fleet.job_key(s["metric"]): ((s["metric"]["node"], s["metric"]["gpu"]),
                                         float(s["value"][1]))
            for s in st.global_.query(JOB_STRAGGLER)}
    assert set(gaps) == plan.straggler_jobs
    named = {gpu for gpu, gap in gaps.values() if gap >= threshold}
    assert named == plan.stragglers
    # Every job, whatever its source, reaches the global job rules (its waiting share).
    jobs = {fleet.job_key(s["metric"]) for s in st.global_.query(JOB_WAITING)}
    assert jobs == plan.straggler_jobs | plan.balanced_jobs
    assert {source for source, _, _ in jobs} == set(fleet.JOB_SOURCES)
    # A Kubernetes or Slurm job's straggler is on another node than ranks waiting on it.
    for job in plan.straggler_jobs:
        (node, _), _gap = gaps[job]
        others = {g.node for g in plan.gpus if g.job == job and g.node != node}
        assert others or job[0] == "process"


def test_gpus_lost_waiting_sum_per_job(stack: tuple[Stack, float], plan: fleet.Fleet) -> None:
    """goodput:job_waiting_gpus:rate5m is the sum of the job's ranks' wait rates, every node
    (and shard) of the job included; balanced jobs lose nothing, and a straggling job loses
    (ranks - 1) x extra / (1 + extra) GPUs."""
    st, _ = stack
    got = {fleet.job_key(s["metric"]): float(s["value"][1])
           for s in st.global_.query(JOB_WAITING_GPUS)}
    want: dict[fleet.JobKey, float] = {}
    for g in plan.gpus:
        if g.job[0]:
            want[g.job] = want.get(g.job, 0.0) + g.wait_rate
    assert set(got) == set(want)
    assert {job for job, value in got.items() if value > 0} == {
        job for job, value in want.items() if value > 0}
    # Every job's sum is its ranks' rates scaled alike: the live rate window still straddles
    # the end of the backfilled history, which lowers every rate by the same factor.
    ratios = [got[job] / value for job, value in want.items() if value > 0]
    assert ratios and min(ratios) > 0.5
    assert max(ratios) == pytest.approx(min(ratios), rel=0.02)


def _home(board: str, expr: str) -> str:
    """Which Prometheus a panel query belongs to: the fleet board and any query reading only
    recorded or federated series go to the global one; the rest read a node's raw series."""
    names = set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr))
    for alternatives in re.findall(r'__name__=~?"([^"]+)"', expr):
        names.update(alternatives.split("|"))
    if board == "goodput-fleet" or all(n.startswith("goodput:") or n in FEDERATED_RAW
                                       for n in names):
        return "global"
    return "shard"


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_every_dashboard_query_has_data(stack: tuple[Stack, float], path: Path) -> None:
    st, end = stack
    empty = []
    for title, expr in targets(load(path)):
        q = substitute(expr)
        servers: list[tuple[Prometheus, float | None]] = (
            [(st.global_, None)] if _home(path.stem, expr) == "global"
            else [(s, end) for s in st.shards])
        # A node board's panel has data for some node: a fault lives on one shard only.
        if not any(server.query(q, at=at) for server, at in servers):
            empty.append(f"{title}: {q}")
    assert not empty, "\n".join(empty)
