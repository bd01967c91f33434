"""The NCCL source against NCCL's RAS protocol on loopback (tests/support/fake_ras.py):
collectives per GPU from each rank's count, jobs side by side behind one port, ranks in
containers, and every way an endpoint can fail, each a one-line reason and a counted error
while the rest keeps working."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from exporter.readings import CollectiveReading, ProcessInfo
from exporter.sources.nccl import ras
from exporter.sources.nccl.config import NcclConfig
from exporter.sources.nccl.source import NcclSource
from tests.support.fake_ras import FakeRas, Rank, document


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def source(port: int, processes: tuple[ProcessInfo, ...], clock: Clock, tmp: Path,
           **cfg: object) -> NcclSource:
    settings = NcclConfig(addresses=[f"127.0.0.1:{port}"], proc_root=str(tmp),
                          **cfg)  # type: ignore[arg-type]
    return NcclSource(settings, lambda: processes, clock=clock)


def tp_pair(count: int) -> dict[str, list[Rank]]:
    """A 2-rank tensor-parallel job, pids 501 and 502 on GPUs 0 and 1, plus the default
    process group's second communicator on the same ranks."""
    return {
        "0xaaa": [Rank(0, 501, 0, {"AllReduce": count}), Rank(1, 502, 1, {"AllReduce": count})],
        "0xbbb": [Rank(0, 501, 0, {"Broadcast": 3}), Rank(1, 502, 1, {"Broadcast": 3})],
    }


PAIR = (ProcessInfo("0", 501), ProcessInfo("1", 502))


async def test_collectives_per_gpu_are_each_ranks_increase(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeRas(document(tp_pair(10_000))) as fake:
        src = source(fake.port, PAIR, clock, tmp_path, connections=1)
        first = (await src.poll()).get(CollectiveReading)
        assert first is not None and first.answered and first.communicators == 2
        assert first.gpus["0"].total == 0 and first.gpus["0"].per_second is None  # a baseline
        fake.doc = document(tp_pair(10_000 + 40_690))
        clock.now += 10.0
        second = (await src.poll()).get(CollectiveReading)
    assert second is not None
    for gpu in ("0", "1"):
        assert second.gpus[gpu].total == 40_690
        assert second.gpus[gpu].per_second == pytest.approx(4069.0)


async def test_jobs_side_by_side_behind_one_port_are_all_found(tmp_path: Path) -> None:
    """Every NCCL process binds the RAS port with SO_REUSEPORT: the kernel hands each
    connection to one of them, so a poll asks several times and merges by communicator."""
    clock = Clock()
    job_b = {"0xccc": [Rank(0, 503, 2, {"AllGather": 7}), Rank(1, 504, 3, {"AllGather": 7})]}
    procs = (*PAIR, ProcessInfo("2", 503), ProcessInfo("3", 504))
    async with FakeRas(document(tp_pair(100))) as a, \
            FakeRas(document(job_b), port=a.port) as b:
        src = source(a.port, procs, clock, tmp_path, connections=8)
        seen: set[str] = set()
        for _ in range(6):
            reading = (await src.poll()).get(CollectiveReading)
            assert reading is not None
            seen |= set(reading.gpus)
            clock.now += 1.0
        assert a.statuses and b.statuses
    assert seen == {"0", "1", "2", "3"}


async def test_ranks_in_containers_are_matched_by_their_own_pid(tmp_path: Path) -> None:
    """A rank in a container reports its namespace's PID; NVML lists the host's."""
    (tmp_path / "70001").mkdir()
    (tmp_path / "70001" / "status").write_text("Name:\tpython3\nNSpid:\t70001\t7\n")
    clock = Clock()
    doc = {"0xddd": [Rank(0, 7, 0, {"AllReduce": 5}), Rank(1, 8, 1, {"AllReduce": 5})]}
    async with FakeRas(document(doc)) as fake:
        src = source(fake.port, (ProcessInfo("4", 70001),), clock, tmp_path, connections=1)
        reading = (await src.poll()).get(CollectiveReading)
    assert reading is not None and set(reading.gpus) == {"4"}  # pid 8: another node's rank


async def test_a_process_on_two_gpus_is_placed_by_the_ranks_device(tmp_path: Path) -> None:
    clock = Clock()
    doc = {"0xeee": [Rank(0, 600, 0, {"AllReduce": 1}), Rank(1, 600, 1, {"AllReduce": 1})]}
    procs = (ProcessInfo("0", 600), ProcessInfo("1", 600))
    async with FakeRas(document(doc)) as fake:
        src = source(fake.port, procs, clock, tmp_path, connections=1)
        await src.poll()
        fake.doc = document({"0xeee": [Rank(0, 600, 0, {"AllReduce": 21}),
                                       Rank(1, 600, 1, {"AllReduce": 41})]})
        clock.now += 2.0
        reading = (await src.poll()).get(CollectiveReading)
    assert reading is not None
    assert (reading.gpus["0"].total, reading.gpus["1"].total) == (20, 40)


async def test_nothing_listening_is_no_error(tmp_path: Path) -> None:
    """No NCCL job on the node: the port is closed; the source is up and says none answered."""
    async with FakeRas() as fake:
        port = fake.port
    result = await source(port, PAIR, Clock(), tmp_path).poll()
    reading = result.get(CollectiveReading)
    assert result.ok and not result.errors
    assert reading is not None and not reading.answered and not reading.gpus


@pytest.mark.parametrize(("behaviour", "reason", "words"), [
    ("hang", "timeout", "gave no status in 0.5 s"),
    ("garbage", "bad_answer", "not an NCCL RAS status"),
    ("old", "no_json", "NCCL older than 2.28"),
    ("other", "bad_answer", "handshake: unexpected answer"),
])
async def test_a_bad_endpoint_is_a_one_line_reason(tmp_path: Path, behaviour: str,
                                                   reason: str, words: str) -> None:
    async with FakeRas(document(tp_pair(1)), behaviour=behaviour) as fake:
        started = time.monotonic()
        result = await source(fake.port, PAIR, Clock(), tmp_path, timeout=0.5,
                              connections=2).poll()
        assert time.monotonic() - started < 2.0
    assert not result.ok and result.reason == reason
    assert words in result.error and "\n" not in result.error
    assert f"127.0.0.1:{fake.port}" in result.error  # the one line names the endpoint


async def test_one_bad_listener_does_not_hide_a_good_one(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeRas(document(tp_pair(5))) as good, \
            FakeRas(behaviour="garbage", port=good.port):
        src = source(good.port, PAIR, clock, tmp_path, connections=8)
        results = []
        for _ in range(4):
            results.append(await src.poll())
            clock.now += 1.0
    answered = [r for r in results if (r.get(CollectiveReading) or CollectiveReading()).answered]
    assert answered and all(r.ok for r in answered)
    assert any(r.errors.get("bad_answer") for r in results)


async def test_an_answer_over_the_cap_is_dropped_and_counted(tmp_path: Path) -> None:
    async with FakeRas(document(tp_pair(1)), behaviour="huge", huge_bytes=1 << 20) as fake:
        result = await source(fake.port, PAIR, Clock(), tmp_path, connections=1,
                              max_body_bytes=65536).poll()
    reading = result.get(CollectiveReading)
    assert not result.ok and result.reason == "too_large"
    assert reading is not None and dict(reading.dropped) == {"too_large": 1}


async def test_communicators_past_the_cap_are_dropped_and_counted(tmp_path: Path) -> None:
    many = {f"0x{i:x}": [Rank(0, 501, 0, {"AllReduce": i})] for i in range(50)}
    async with FakeRas(document(many)) as fake:
        src = source(fake.port, PAIR, Clock(), tmp_path, connections=1, max_communicators=8)
        reading = (await src.poll()).get(CollectiveReading)
    assert reading is not None and reading.communicators == 8
    assert dict(reading.dropped) == {"max_communicators": 42}


def test_an_address_must_be_host_and_port() -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        NcclConfig(addresses=["localhost"])


def test_the_status_schema_takes_ncclss_own_document() -> None:
    doc = document(tp_pair(3))
    status = ras.parse(__import__("json").dumps(doc).encode())
    assert [c.hash for c in status.communicators] == ["0xaaa", "0xbbb"]
    assert status.communicators[0].ranks[1].collectives == 3


def test_another_nodes_rank_with_a_local_pid_is_not_counted_here() -> None:
    """PIDs repeat across nodes: of the hosts whose ranks match GPU processes here, the
    one with the most matches is this node; a tie goes to device indices that agree."""
    from exporter.sources.nccl.counting import local_ranks

    here = {501: "0", 502: "1", 777: "5"}

    def gpu_of(rank: ras.RasRank) -> str | None:
        return here.get(rank.pid)

    def rank(r: int, pid: int, dev: int, host: str) -> ras.RasRank:
        return ras.RasRank(rank=r, pid=pid, nvml_dev=dev, host=host)

    job = [rank(0, 501, 0, "a"), rank(1, 502, 1, "a"), rank(2, 777, 0, "b")]
    assert [r.rank for r, _ in local_ranks(job, gpu_of)] == [0, 1]
    tie = [rank(0, 501, 0, "a"), rank(1, 777, 0, "b")]
    assert [r.rank for r, _ in local_ranks(tie, gpu_of)] == [0]  # 777 is GPU 5, not 0
    both_wrong = [rank(0, 501, 3, "a"), rank(1, 777, 3, "b")]
    assert local_ranks(both_wrong, gpu_of) == []


async def test_pods_are_asked_at_their_ip(tmp_path: Path) -> None:
    """On Kubernetes the daemon's localhost is its own: a GPU pod whose job binds RAS to
    all its addresses (NCCL_RAS_ADDR=0.0.0.0:28028) is asked at its IP, which the API
    server told (kubernetes.pod_labels); pods without a GPU here are not asked."""
    from exporter.readings import ContainerGpus, PodAssignments, PodJobs
    from exporter.snapshot import SnapshotStore, SourceResult
    from exporter.sources.nccl.source import pod_addresses

    store = SnapshotStore("node-a")
    store.publish(SourceResult(source="kubelet", reading=PodAssignments((
        ContainerGpus("ml", "tp-0", "main", "nvidia.com/gpu", ("GPU-a", "GPU-b"), ("0", "1")),
    ))))
    store.publish(SourceResult(source="pod_labels", reading=PodJobs(
        {}, {("ml", "tp-0"): "127.0.0.2", ("web", "nginx"): "127.0.0.3"})))
    async with FakeRas(document(tp_pair(7)), host="127.0.0.2") as pod:
        assert pod_addresses(store.current, pod.port) == [f"127.0.0.2:{pod.port}"]
        settings = NcclConfig(addresses=["127.0.0.1:1"], pod_port=pod.port,
                              proc_root=str(tmp_path), connections=1)
        src = NcclSource(settings, lambda: PAIR, clock=Clock(),
                         pods=lambda: pod_addresses(store.current, pod.port))
        result = await src.poll()
    reading = result.get(CollectiveReading)
    assert result.ok and reading is not None and reading.answered
    assert set(reading.gpus) == {"0", "1"}


async def test_a_job_that_ended_takes_its_rate_with_it(tmp_path: Path) -> None:
    """A poll may miss a job (another job's process took the connection), so a rank's rate
    outlives a poll without it; but once its process is off the GPU, the rate is gone."""
    clock = Clock()
    procs = list(PAIR)
    async with FakeRas(document(tp_pair(0))) as fake:
        src = NcclSource(NcclConfig(addresses=[f"127.0.0.1:{fake.port}"], connections=1,
                                    proc_root=str(tmp_path)), lambda: tuple(procs), clock=clock)
        await src.poll()
        fake.doc = document(tp_pair(1000))
        clock.now += 1.0
        await src.poll()
        fake.doc = document({})  # this poll reached another job's process
        clock.now += 1.0
        missed = (await src.poll()).get(CollectiveReading)
        procs.clear()  # the job ended
        clock.now += 1.0
        ended = (await src.poll()).get(CollectiveReading)
    assert missed is not None and missed.gpus["0"].per_second == 1000.0
    assert ended is not None and ended.gpus["0"].per_second is None
    assert ended.gpus["0"].total == 1000.0  # the counter never goes back


async def test_a_stuck_proc_read_costs_its_thread_not_the_poll(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read of /proc/<pid>/status that never returns (a process stuck in the kernel):
    the poll gives it up after the reader's timeout, counts it, publishes the rest, and
    does not read that process again while the read is stuck."""
    import threading

    from exporter.sources.nccl import source as nccl_source

    release, calls = threading.Event(), []
    real = nccl_source.read_small  # type: ignore[attr-defined]

    def read_small(path: str, cap: int) -> bytes:
        calls.append(path)
        if path.endswith("/70001/status"):
            release.wait(30)
        return real(path, cap)

    monkeypatch.setattr(nccl_source, "read_small", read_small)
    for pid in ("70001", "70002"):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "status").write_text(f"NSpid:\t{pid}\t{int(pid) - 70000}\n")
    doc = {"0xfff": [Rank(0, 1, 0, {"AllReduce": 5}), Rank(1, 2, 1, {"AllReduce": 5})]}
    procs = (ProcessInfo("0", 70001), ProcessInfo("1", 70002))
    try:
        async with FakeRas(document(doc)) as fake:
            src = source(fake.port, procs, Clock(), tmp_path, connections=1)
            started = time.monotonic()
            first = await src.poll()
            took = time.monotonic() - started
            second = await src.poll()
            await src.close()
    finally:
        release.set()
    reading = first.get(CollectiveReading)
    assert took < 3.0 and first.ok and first.errors == {"proc_read_timeout": 1}
    assert first.stuck_reads == 1
    assert reading is not None and set(reading.gpus) == {"1"}  # rank 1 (pid 2) is placed
    assert calls.count(f"{tmp_path}/70001/status") == 1  # not read again while stuck
    assert second.errors == {"proc_read_timeout": 1}


async def test_an_endpoint_failing_beside_answering_ones_is_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The poll stays up (other listeners answer); the failing one is counted every poll
    and logged once, naming the address and the reason."""
    from structlog.testing import capture_logs

    clock = Clock()
    async with FakeRas(document(tp_pair(5))) as good, \
            FakeRas(behaviour="garbage", port=good.port):
        src = source(good.port, PAIR, clock, tmp_path, connections=8)
        with capture_logs() as logs:
            for _ in range(3):
                await src.poll()
                clock.now += 1.0
    lines = [e for e in logs if e["event"] == "nccl_ras_endpoint_failed"]
    assert len(lines) == 1 and lines[0]["reason"] == "bad_answer"
    assert f"127.0.0.1:{good.port}" in lines[0]["error"]


async def test_a_count_no_gpu_could_reach_is_dropped_and_counted(tmp_path: Path) -> None:
    """Anything can listen on the RAS port: a count that rises by 10^12 in a second is not
    believed, the rank is re-based, and the next honest increase counts again."""
    clock = Clock()
    async with FakeRas(document(tp_pair(0))) as fake:
        src = source(fake.port, PAIR, clock, tmp_path, connections=1)
        await src.poll()
        fake.doc = document(tp_pair(10**12))
        clock.now += 1.0
        lied = (await src.poll()).get(CollectiveReading)
        fake.doc = document(tp_pair(10**12 + 500))
        clock.now += 1.0
        honest = (await src.poll()).get(CollectiveReading)
    assert lied is not None and lied.gpus["0"].total == 0
    assert dict(lied.dropped) == {"implausible": 2}  # one per rank
    assert honest is not None and honest.gpus["0"].total == 500
