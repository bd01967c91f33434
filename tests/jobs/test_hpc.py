"""dcgm-exporter's HPC job-mapping directory: a file per GPU index, one job id per line."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from exporter.readings import Device, JobAssignments, JobIdentity
from exporter.snapshot import SourceResult
from exporter.sources.jobs.hpc import MAX_FILE, MAX_JOBS, HpcJobMapSource

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
    assert result.get(JobAssignments).gpus["0"] == JobIdentity("hpc", "4242")  # type: ignore[union-attr]


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
