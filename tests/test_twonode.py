"""One simulated host as two nodes (testkit/twonode.py): two daemons, each owning part of the
GPUs (``--devices``) under its own node name, and a real Prometheus with the mixin's rules.
The simulated Slurm job 4242 (GPUs 9 and 10, exporter/sim/patterns.py) is split across them,
so no node sees both ranks: the rules alone name its straggler (GPU 9, on the first daemon,
stalled on its host), never GPU 10 (on the second, which only waits), and count the
GPU-hours it waited and its time split, as they do with both GPUs on one daemon."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.twonode import Plan, main, run

pytestmark = pytest.mark.integration

JOB = "slurm//4242"
SECONDS = 30  # measured, after one rule window (20 s) of warm-up


def _run(tmp_path_factory: pytest.TempPathFactory, devices_a: str, devices_b: str) -> dict:
    plan = Plan(devices_a=devices_a, devices_b=devices_b, seconds=SECONDS, window="20s",
                out=tmp_path_factory.mktemp("twonode"), simulate=True)
    return run(plan, log=lambda _m: None)


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Job 4242 split: GPU 9 on half-a, GPU 10 on half-b."""
    return _run(tmp_path_factory, "0-9", "10,11")


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same job with both GPUs on half-a: what the split run must agree with."""
    return _run(tmp_path_factory, "0-10", "11")


def test_the_rules_name_the_cross_node_straggler_only(result: dict) -> None:
    gap = result["min_waiting_gap"]
    named = {(r["node"], r["gpu"]) for r in result["straggler"]
             if r["job"] == JOB and r["value"] >= gap}
    assert named == {("half-a", "9")}, result["straggler"]
    alerts = {(r["node"], r["gpu"]) for r in result["alerts"] if r["job"] == JOB}
    assert alerts == {("half-a", "9")}, result["alerts"]
    shares = {r["gpu"]: r["value"] for r in result["gpu_waiting_share"] if r["job"] == JOB}
    assert shares["10"] - shares["9"] >= gap, shares
    evaluations = {(r["node"], r["gpu"]): r["value"] for r in result["named_evaluations"]}
    assert set(evaluations) == {("half-a", "9")}, evaluations


def test_the_job_waited_gpu_hours_and_its_split_come_from_the_rules(result: dict) -> None:
    job = result["jobs"][JOB]
    assert job["gpus"] == pytest.approx(2.0, abs=0.1)
    assert sum(job["split"].values()) == pytest.approx(job["gpus"], rel=0.01)
    assert job["split"]["waiting"] > 0 and job["waiting_share"] > 0
    assert job["split_share"]["waiting"] == pytest.approx(job["waiting_share"], abs=0.01)
    # The waited share over the run, from the counters, is the rule's (the job is steady).
    assert job["waiting_share"] == pytest.approx(job["waiting_share_run"], abs=0.05)
    # A few GPU-seconds waited over the measured span, read from the rule (one sample per
    # evaluation, as the fleet dashboard reads it) as from the raw counters.
    assert 0 < job["waited_gpu_hours"] < 2 * SECONDS / 3600
    assert job["waited_gpu_hours"] == pytest.approx(job["waited_gpu_hours_counters"], rel=0.15)


def test_a_missing_prometheus_is_one_line_and_exit_2(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--devices-a", "0", "--devices-b", "1", "--out", str(tmp_path),
              "--prometheus", str(tmp_path / "no-such-prometheus")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--prometheus" in err


def test_split_over_two_nodes_the_job_reads_as_on_one(result: dict, one_node: dict) -> None:
    """Straggler, gap, waiting shares, waited GPU-hours and time split agree whether the
    job's GPUs sit on one node or two; only the node's own naming differs (a node with one
    GPU of the job has no peer to name)."""
    def gap(r: dict) -> float:
        return next(s["value"] for s in r["straggler"] if s["job"] == JOB)

    assert gap(result) == pytest.approx(gap(one_node), abs=0.02)
    split, whole = result["jobs"][JOB], one_node["jobs"][JOB]
    assert split["waiting_share"] == pytest.approx(whole["waiting_share"], abs=0.02)
    assert split["waited_gpu_hours"] == pytest.approx(whole["waited_gpu_hours"], rel=0.05)
    for part in ("working", "transferring", "waiting", "host_stalled"):
        assert split["split_share"][part] == pytest.approx(whole["split_share"][part],
                                                           abs=0.02), part
    assert {(r["node"], r["gpu"]) for r in one_node["node_named"]} == {("half-a", "9")}
    assert result["node_named"] == []
