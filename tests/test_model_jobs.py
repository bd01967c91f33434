"""Stragglers by comparison (exporter/model/jobs.py) at the figures measured on two H200
(docs/validation/jobs-h200.md): each pair of windows is the median of one row's steady
windows, the expected waited share the ranks' own CUDA-event truth."""

from __future__ import annotations

import math

import pytest

from exporter.model.job_identity import resolve
from exporter.readings import Device, JobAssignments, NodeVerdicts, ProfilingWindow
from exporter.snapshot import SourceResult
from exporter.sources.jobs.identity import PROCESS, SLURM
from tests.test_model_node import H100, Node, job


def win(busy: float, sm: float, tensor: float, dram: float = 0.15, nvlink: float = 13e9,
        wiggle: float = 0.0) -> ProfilingWindow:
    """One rank's window; ``busy`` is kernel time (GPM graphics activity)."""
    return ProfilingWindow(1.0, graphics_active=busy, sm_active=sm + wiggle,
                           sm_occupancy=0.3, tensor_active=tensor, dram_active=dram,
                           nvlink_bytes_per_second=(("rx", nvlink), ("tx", nvlink)))


# row -> (rank 0's window, rank 1's window, rank 0's waited share by the ranks' truth); NVML
# utilization equals the kernel time except on the host-stalled rank (UTIL)
MEASURED = {
    "5x": (win(0.99, 0.2885, 0.1296), win(0.985, 0.9435, 0.9126), 0.8105),
    "25pct": (win(0.97, 0.6604, 0.5764), win(0.965, 0.8996, 0.8638), 0.2781),
    "10pct": (win(0.96, 0.757, 0.6927), win(0.98, 0.9019, 0.865), 0.1599),
    "host_stall": (win(1.0, 0.2027, 0.0252, nvlink=0.4e9), win(0.0, 0.0265, 0.0252, nvlink=0.4e9),
                   0.9591),
}


UTIL = {"host_stall": {"0": 1.0, "1": 0.0}}


def slurm(*gpus: str) -> JobAssignments:
    return JobAssignments("slurm", {g: SLURM.identity("4242") for g in gpus})


def run_job(w0: ProfilingWindow, w1: ProfilingWindow, n: int, *, pods: bool = True,
            util: dict[str, float] | None = None) -> tuple[Node, NodeVerdicts]:
    node = Node(gpus=("0", "1"), pods=job("0", "1") if pods else None)
    if not pods:
        node.store.publish(SourceResult(source="jobs", reading=slurm("0", "1")))
    verdicts = node.run(n, {"0": w0, "1": w1}, util=util or 1.0)
    return node, verdicts


def waited_share(verdicts: NodeVerdicts, gpu: str, before: NodeVerdicts, seconds: float) -> float:
    now = dict(verdicts.jobs[0].wait_seconds)[gpu]
    then = dict(before.jobs[0].wait_seconds)[gpu]
    return (now - then) / seconds


@pytest.mark.parametrize("row", sorted(MEASURED))
def test_the_slow_rank_is_named_and_the_waited_share_matches_the_truth(row: str) -> None:
    w0, w1, truth = MEASURED[row]
    node = Node(gpus=("0", "1"), pods=job("0", "1"))
    util = UTIL.get(row, {"0": 1.0, "1": 1.0})
    first = node.run(5, {"0": w0, "1": w1}, util=util)
    assert first.jobs[0].straggler == ""  # not from a job's first seconds alone
    named = node.run(6, {"0": w0, "1": w1}, util=util)
    assert named.jobs[0].straggler == "1"  # ... but once it has held 10 s
    before = node.run(30, {"0": w0, "1": w1}, util=util)
    after = node.run(60, {"0": w0, "1": w1}, util=util)
    (j,) = after.jobs
    assert j.straggler == "1"
    assert waited_share(after, "0", before, 60) == pytest.approx(truth, abs=0.05)
    assert waited_share(after, "1", before, 60) == pytest.approx(0.0, abs=0.01)
    assert not after.gpus["0"].busy_unproductive  # waiting is not hollow work


def test_a_mostly_waiting_rank_is_comm_wait_a_mildly_waiting_one_keeps_its_regime() -> None:
    _, five = run_job(*MEASURED["5x"][:2], 12)
    assert five.gpus["0"].regime == "comm_wait" and five.gpus["1"].regime == "compute_bound"
    _, mild = run_job(*MEASURED["10pct"][:2], 12)
    assert mild.gpus["0"].regime == "compute_bound"  # 77 % of its time in its own GEMMs
    assert mild.jobs[0].straggler == "1"


def test_a_rank_stalled_on_its_host_is_the_straggler_and_its_peer_waits() -> None:
    """The waiting rank spins in NCCL (0.4 GB/s of NVLink): comm_wait, never launch_bound
    with hollow_busy; the stalled rank is host_bound."""
    _, v = run_job(*MEASURED["host_stall"][:2], 12, util=UTIL["host_stall"])
    assert v.jobs[0].straggler == "1"
    assert v.gpus["1"].regime in ("host_bound", "allocated_idle")
    assert v.gpus["0"].regime == "comm_wait" and not v.gpus["0"].hollow_busy


@pytest.mark.parametrize("pair", [
    (win(0.97, 0.8925, 0.8539), win(0.97, 0.8797, 0.8386)),  # balanced all-reduce
    (win(0.97, 0.9229, 0.874), win(0.98, 0.9154, 0.8611)),  # DDP, all-reduce overlapped
    (win(0.94, 0.6748, 0.647), win(0.95, 0.6789, 0.6266)),  # two-stage pipeline, equal work
])
def test_balanced_jobs_never_name_anyone_even_with_noise(
        pair: tuple[ProfilingWindow, ProfilingWindow]) -> None:
    node = Node(gpus=("0", "1"), pods=job("0", "1"))
    w0, w1 = pair
    for i in range(300):  # 5 minutes of 1 s windows, each rank's SM active wiggling +-0.04
        noisy = {
            "0": win(w0.graphics_active or 0, w0.sm_active or 0, w0.tensor_active or 0,
                     wiggle=0.04 * math.sin(i * 0.7)),
            "1": win(w1.graphics_active or 0, w1.sm_active or 0, w1.tensor_active or 0,
                     wiggle=0.04 * math.sin(i * 1.3 + 2)),
        }
        v = node.step(noisy)
        assert v.jobs[0].straggler == "", f"named at window {i}"
    waited = [seconds / 300 for _gpu, seconds in v.jobs[0].wait_seconds]
    # the ranks wait alike: little for all-reduces, a pipeline's bubbles for its stages
    assert max(waited) - min(waited) < 0.05
    assert max(waited) < (0.25 if pair[0].sm_active == 0.6748 else 0.05)


def test_a_slurm_job_is_judged_like_a_pod() -> None:
    _, v = run_job(*MEASURED["10pct"][:2], 12, pods=False)
    (j,) = v.jobs
    assert j.identity == SLURM.identity("4242") and j.straggler == "1"


def test_the_kubelet_wins_over_slurm_for_the_same_gpu() -> None:
    node, _ = run_job(*MEASURED["10pct"][:2], 1)
    node.store.publish(SourceResult(source="jobs", reading=slurm("0", "1")))
    assert {i.source for i in resolve(node.store.current).values()} == {"kubernetes"}


def test_a_job_that_ends_takes_its_counters_with_it() -> None:
    node, v = run_job(*MEASURED["5x"][:2], 3, pods=False)
    assert v.jobs
    node.store.publish(SourceResult(source="jobs", reading=JobAssignments("slurm", {})))
    assert node.step({"0": MEASURED["5x"][0], "1": MEASURED["5x"][1]}).jobs == ()
    node.store.publish(SourceResult(source="jobs", reading=slurm("0", "1")))
    again = node.step({"0": MEASURED["5x"][0], "1": MEASURED["5x"][1]})
    assert max(dict(again.jobs[0].wait_seconds).values()) <= 1.0  # counted from 0 again


def test_peer_to_peer_receive_is_transfer_bound_and_names_no_straggler() -> None:
    """GPU 0 copies to GPU 1 over NVLink at 400 GB/s: GPU 1 runs no kernel of its own and
    its copy time reads 0, yet it is fed at full speed, not waiting on its host."""
    devices = tuple(Device(g, f"GPU-{g}", H100, link_peaks=(("nvlink", 450e9),))
                    for g in ("0", "1"))
    node = Node(gpus=("0", "1"), devices=devices, pods=job("0", "1"))
    send = ProfilingWindow(1.0, graphics_active=0.0, sm_active=0.0, sm_occupancy=0.0,
                           tensor_active=0.0, dram_active=0.08,
                           nvlink_bytes_per_second=(("rx", 1e9), ("tx", 400e9)))
    recv = ProfilingWindow(1.0, graphics_active=0.0, sm_active=0.0, sm_occupancy=0.0,
                           tensor_active=0.0, dram_active=0.08,
                           nvlink_bytes_per_second=(("rx", 400e9), ("tx", 1e9)))
    v = node.run(6, {"0": send, "1": recv}, util=0.0)
    assert v.gpus["1"].regime == "transfer_bound"
    assert v.jobs[0].straggler == ""


def test_peer_fed_without_known_link_peak_is_still_transfer_bound() -> None:
    recv = ProfilingWindow(1.0, graphics_active=0.0, sm_active=0.0, sm_occupancy=0.0,
                           tensor_active=0.0, dram_active=0.08,
                           nvlink_bytes_per_second=(("rx", 400e9), ("tx", 1e9)))
    v = Node(gpus=("0",)).run(6, {"0": recv}, util=0.0)
    assert v.gpus["0"].regime == "transfer_bound"


def test_a_pipeline_stage_blocked_in_a_send_waits_on_the_heavier_stage() -> None:
    """Two-stage pipeline, stage 2 with 25 % more GEMMs (measured on two H200): the traffic
    goes one way, so the blocked send spins with almost no SM. By the ranks' own truth
    (comm beyond the transfer alone) stage 1 waited 0.374 and the heavier stage 2 0.150 (its
    receives wait out the pipeline's fill): both counted, stage 2 still the straggler."""
    send = ProfilingWindow(1.0, graphics_active=0.9881, sm_active=0.5803, sm_occupancy=0.3,
                           tensor_active=0.5586, dram_active=0.12,
                           nvlink_bytes_per_second=(("rx", 0.126e6), ("tx", 3.64e9)))
    recv = ProfilingWindow(1.0, graphics_active=0.9908, sm_active=0.8142, sm_occupancy=0.3,
                           tensor_active=0.7701, dram_active=0.15,
                           nvlink_bytes_per_second=(("rx", 3.64e9), ("tx", 0.126e6)))
    node = Node(gpus=("0", "1"), pods=job("0", "1"))
    before = node.run(10, {"0": send, "1": recv})
    after = node.run(60, {"0": send, "1": recv})
    assert after.jobs[0].straggler == "1"
    assert waited_share(after, "0", before, 60) == pytest.approx(0.3738, abs=0.05)


@pytest.mark.parametrize(("gap", "named"), [(0.11, True), (0.24, True), (0.003, False)])
def test_the_issues_work_gaps_between_a_slow_and_a_waiting_rank(gap: float, named: bool) -> None:
    """The SM-active gaps first measured on the H200 pair (NCCL all-reduce of 128 MiB a
    step): 10 % more work 0.11, 25 % more 0.24, balanced 0.003; both ranks' kernels resident
    about 97 % of the time, so the gap is all hollow time on the waiting rank."""
    waiting = win(0.97, 0.85 - gap, 0.80 - gap)
    slow = win(0.97, 0.85, 0.80)
    _, v = run_job(waiting, slow, 120)
    assert v.jobs[0].straggler == ("1" if named else "")


def test_one_gpu_of_a_slurm_job_is_split_a_lone_process_is_not() -> None:
    """A Slurm job whose other ranks run on other nodes: its one GPU here still gets its
    waiting and time split (the rules compare the nodes); a lone process session does not."""
    waiting, _slow = MEASURED["10pct"][:2]
    node = Node(gpus=("0",), pods=None)
    node.store.publish(SourceResult(source="jobs", reading=slurm("0")))
    v = node.run(5, {"0": waiting})
    (j,) = v.jobs
    assert j.gpus == ("0",) and j.straggler == ""
    parts = {part: seconds for _gpu, part, seconds in j.part_seconds}
    assert sum(parts.values()) == pytest.approx(5.0)
    assert parts["waiting"] / 5 == pytest.approx(0.16, abs=0.05)
    lone = Node(gpus=("0",), pods=None)
    lone.store.publish(SourceResult(source="jobs", reading=JobAssignments(
        "process", {"0": PROCESS.identity("vm/4101-1")})))
    assert lone.run(5, {"0": waiting}).jobs == ()


def test_ranks_waiting_for_a_late_joiner_wait_though_no_bytes_move() -> None:
    """The first all-reduce of a job whose last rank is still loading: its peers' kernels
    spin (SM 0.2) with no NVLink traffic at all, the late rank runs nothing (measured on
    two H200: 8 s of it, 0.41 of the row waited by the ranks' timing)."""
    spinning = ProfilingWindow(1.0, graphics_active=0.998, sm_active=0.2, sm_occupancy=0.05,
                               tensor_active=0.0, dram_active=0.0,
                               nvlink_bytes_per_second=(("rx", 0.0), ("tx", 0.0)))
    late = ProfilingWindow(1.0, graphics_active=0.0, sm_active=0.0, sm_occupancy=0.0,
                           tensor_active=0.0, dram_active=0.0,
                           nvlink_bytes_per_second=(("rx", 0.0), ("tx", 0.0)))
    node = Node(gpus=("0", "1"), pods=job("0", "1"))
    before = node.run(1, {"0": spinning, "1": late}, util={"0": 1.0, "1": 0.0})
    after = node.run(8, {"0": spinning, "1": late}, util={"0": 1.0, "1": 0.0})
    assert waited_share(after, "0", before, 8) == pytest.approx(0.97, abs=0.05)
    assert waited_share(after, "1", before, 8) == 0.0
    assert after.jobs[0].straggler == ""  # 9 s: not yet
