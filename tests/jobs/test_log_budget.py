"""Bytes, not lines ([identity], issue 38): 10,000 GPU processes churning on 8 GPUs, each
its own process session, make every GPU "shared by" some 1,250 jobs, and every poll changes
the set. One virtual minute of it must stay under the log budgets of docs/security.md."""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from exporter.process import logdamp
from exporter.process.logging import configure
from exporter.readings import ProcessInfo
from exporter.sources.jobs.config import JobsConfig
from exporter.sources.jobs.procfs import ProcJobSource

PROCESSES = 10_000
GPUS = 8
CHURN = 100
"""Processes that leave NVML's list, and come back, at each poll."""
FIRST_PID = 100_000
ONE_SUBJECT_BUDGET = 8 * 1024
ONE_EVENT_BUDGET = 64 * 1024


class Clock:
    """The damper's clock, moved by the test: one poll a second."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[io.StringIO, Clock]]:
    clock = Clock()
    monkeypatch.setattr(logdamp, "clock", clock)
    logdamp.DAMPER.reset()
    buf = io.StringIO()
    configure("json", "info", stream=buf)
    # module loggers (procfs's) must not keep this stream after the test
    structlog.configure(cache_logger_on_first_use=False)
    yield buf, clock
    logdamp.DAMPER.reset()
    structlog.reset_defaults()


def _tree(root: Path) -> None:
    """10,000 processes, each the leader of its own session."""
    cgroup = b"0::/user.slice/user-1000.slice/session-1.scope\n"
    for pid in range(FIRST_PID, FIRST_PID + PROCESSES):
        d = root / str(pid)
        d.mkdir()
        fields = ["S", "1", str(pid), str(pid), *["0"] * 15, str(pid), "0"]
        (d / "stat").write_bytes(f"{pid} (python3) {' '.join(fields)}\n".encode())
        (d / "cgroup").write_bytes(cgroup)


def test_ten_thousand_churning_processes_stay_under_the_byte_budget(
    tmp_path: Path, log: tuple[io.StringIO, Clock]
) -> None:
    buf, clock = log
    _tree(tmp_path)
    pids = list(range(FIRST_PID, FIRST_PID + PROCESSES))
    listed: list[ProcessInfo] = []
    src = ProcJobSource(JobsConfig(environ=False), str(tmp_path), "n1",
                        processes=lambda: tuple(listed))
    for second in range(60):
        gone = set(pids[(second * CHURN) % PROCESSES:][:CHURN])
        listed[:] = [ProcessInfo(str(pid % GPUS), pid) for pid in pids if pid not in gone]
        result = src.poll_blocking()
        assert result.ok
        clock.now += 1.0
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    shared = [line for line in lines if line["event"] == "gpu_shared_by_jobs"]
    sizes = [len(json.dumps(line)) + 1 for line in shared]
    per_gpu: Counter[str] = Counter()
    for line, size in zip(shared, sizes, strict=True):
        per_gpu[line["gpu"]] += size
    written = len(buf.getvalue().encode())
    print(f"\n{len(shared)} gpu_shared_by_jobs lines, {sum(sizes)} bytes, longest "
          f"{max(sizes)}; whole log {written} bytes in the minute; suppressed "
          f"{logdamp.DAMPER.suppressed['gpu_shared_by_jobs']}")
    assert shared and all(line["jobs_total"] >= PROCESSES // GPUS - CHURN for line in shared)
    assert max(sizes) <= 2048
    assert max(per_gpu.values()) <= ONE_SUBJECT_BUDGET, per_gpu
    assert sum(sizes) <= ONE_EVENT_BUDGET
    assert logdamp.DAMPER.suppressed["gpu_shared_by_jobs"] > 0
    assert os.path.isdir(tmp_path)


def test_a_long_list_in_any_line_is_cut_with_a_count(log: tuple[io.StringIO, Clock]) -> None:
    buf, _ = log
    structlog.get_logger("t").warning("many", ids=[str(i) for i in range(5000)],
                                      note="x" * 100_000)
    (line,) = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert len(line["ids"]) == logdamp.MAX_LIST_ITEMS
    assert line["ids_omitted"] == 5000 - logdamp.MAX_LIST_ITEMS
    assert len(line["note"]) < logdamp.MAX_FIELD_CHARS + 20


def test_big_lines_spend_the_subject_byte_budget(log: tuple[io.StringIO, Clock]) -> None:
    """Lines the line damper would pass (one per 10 s) but of 2 KB each: a minute of them
    stays under one subject's 8 KiB, and the next line written says how many were left out."""
    buf, clock = log
    for _ in range(600):
        structlog.get_logger("t").warning("wide", gpu="3", **{
            f"f{i}": "y" * logdamp.MAX_FIELD_CHARS for i in range(4)})
        clock.now += 0.1
    text = buf.getvalue()
    assert len(text.encode()) <= ONE_SUBJECT_BUDGET
    assert any("suppressed" in json.loads(line) for line in text.splitlines()[1:])
