"""dcgm-exporter's HPC job-mapping directory: a file per GPU index, one job id per line."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from exporter.readings import Device, JobAssignments
from exporter.snapshot import SourceResult
from exporter.sources.jobs.hpc import HPC, MAX_FILE, MAX_JOBS, HpcJobMapSource

INVENTORY = (
    Device("0", "GPU-0"),
    Device("1", "GPU-1"),
    Device("2", "GPU-2"),
    Device("3-1", "MIG-3-1", parent_uuid="GPU-3", gpu_instance_id="1"),
    Device("3-2", "MIG-3-2", parent_uuid="GPU-3", gpu_instance_id="2"),
)


def poll(directory: Path, src: HpcJobMapSource | None = None) -> SourceResult:
    src = src or HpcJobMapSource(str(directory), 5.0, lambda: INVENTORY)
    return src.poll_blocking()


def gpus(result: SourceResult) -> dict[str, str]:
    reading = result.get(JobAssignments)
    assert reading is not None and reading.source == "hpc"
    assert all(j.source == "hpc" and j.namespace == "" for j in reading.gpus.values())
    return {gpu: j.job_id for gpu, j in reading.gpus.items()}


def test_the_format_dcgm_exporter_reads(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("4242\n")
    (tmp_path / "1").write_text("4242")  # no final newline
    (tmp_path / "2").write_text("")  # emptied by an epilog: no job
    (tmp_path / "3").write_text("\n77\n\n")  # a whole GPU index covers its MIG instances
    (tmp_path / "README").write_text("not a GPU index\n")
    (tmp_path / "9").mkdir()  # directories are skipped
    result = poll(tmp_path)
    assert result.ok and not result.errors
    assert gpus(result) == {"0": "4242", "1": "4242", "3-1": "77", "3-2": "77"}
    assert result.get(JobAssignments).gpus["0"] == HPC.identity("4242")  # type: ignore[union-attr]


def test_several_jobs_pick_the_first_by_order_and_count_once(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("20\n10\n")
    src = HpcJobMapSource(str(tmp_path), 5.0, lambda: INVENTORY)
    with capture_logs() as logs:
        first = src.poll_blocking()
    assert gpus(first) == {"0": "10"} and first.errors == {"several_jobs": 1}
    assert logs[0]["reason"] == "several_jobs"
    assert src.poll_blocking().errors == {}  # the same problem is not counted every poll
    (tmp_path / "0").write_text("10\n")
    assert src.poll_blocking().errors == {}
    (tmp_path / "0").write_text("10\n30\n")
    assert src.poll_blocking().errors == {"several_jobs": 1}  # it came back


def test_bad_ids_and_oversized_files_are_dropped_and_counted(tmp_path: Path) -> None:
    (tmp_path / "0").write_text('1"} 1\n')
    (tmp_path / "1").write_text("x" * 200 + "\n")
    (tmp_path / "2").write_bytes(b"5\n" * (MAX_FILE // 2) + b"123456")
    result = poll(tmp_path)
    assert gpus(result) == {"2": "5"}
    assert result.errors == {"value_invalid": 1, "value_too_long": 1, "file_too_long": 1}
    assert MAX_JOBS < MAX_FILE // 2


def test_a_missing_directory_fails_the_poll_with_its_name(tmp_path: Path) -> None:
    result = poll(tmp_path / "absent")
    assert not result.ok and result.reason == "dir_missing"
    assert str(tmp_path / "absent") in result.error


# --- a hostile mapping directory ([identity], issue 38) -----------------------------------


def test_a_symlinked_mapping_file_is_not_followed(tmp_path: Path) -> None:
    """A symlink to a root-only file outside the directory: its first id-shaped line must
    not become a public job id."""
    outside = tmp_path / "etc-secret"
    outside.write_text("s3cr3t-token\n")
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "0").symlink_to(outside)
    (mapping / "1").write_text("4242\n")
    result = poll(mapping)
    assert gpus(result) == {"1": "4242"}
    assert result.errors == {"not_regular_file": 1}
    assert "s3cr3t" not in repr(result)


def test_two_thousand_files_keep_the_lowest_indices(tmp_path: Path) -> None:
    """Over the cap, the lowest GPU indices are kept in numeric order: GPUs 2-9 keep their
    jobs (string order would keep 0, 1, 10, 100, 1000, ...)."""
    for index in range(2000):
        (tmp_path / str(index)).write_text(f"{index + 1}\n")
    inventory = tuple(Device(str(i), f"GPU-{i}") for i in range(10))
    result = HpcJobMapSource(str(tmp_path), 5.0, lambda: inventory).poll_blocking()
    assert gpus(result) == {str(i): str(i + 1) for i in range(10)}
    assert result.errors == {"too_many_files": 1}


def test_a_fifo_swapped_in_never_blocks(tmp_path: Path) -> None:
    import os

    (tmp_path / "0").write_text("7\n")
    src = HpcJobMapSource(str(tmp_path), 5.0, lambda: INVENTORY)
    assert gpus(src.poll_blocking()) == {"0": "7"}
    (tmp_path / "0").unlink()
    os.mkfifo(tmp_path / "0")  # as if swapped between the listing and the open
    (tmp_path / "1").write_text("8\n")
    result = src.poll_blocking()
    assert result.ok and gpus(result) == {"1": "8"}
    assert result.errors == {"not_regular_file": 1}


def test_a_fifo_swapped_in_after_the_listing_never_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from exporter.sources.jobs import hpc

    os.mkfifo(tmp_path / "0")
    (tmp_path / "1").write_text("8\n")
    monkeypatch.setattr(hpc, "_list", lambda _: (["0", "1"], []))  # listed as a file
    result = poll(tmp_path)
    assert result.ok and gpus(result) == {"1": "8"}
    assert result.errors == {"not_regular_file": 1}


def test_a_read_that_sleeps_is_given_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from exporter.sources.jobs import hpc, reader

    monkeypatch.setattr(reader, "READ_TIMEOUT", 0.3)
    release = threading.Event()
    real = hpc.read_jobs

    def sleepy(path: str) -> tuple[list[bytes], bool]:
        if path.endswith("/0"):
            release.wait()
        return real(path)

    monkeypatch.setattr(hpc, "read_jobs", sleepy)
    (tmp_path / "0").write_text("7\n")
    (tmp_path / "1").write_text("8\n")
    try:
        started = time.monotonic()
        result = poll(tmp_path)
        assert time.monotonic() - started < 2
    finally:
        release.set()
    assert result.ok and gpus(result) == {"1": "8"}
    assert result.errors == {"read_timeout": 1}
