"""pytest -q stays silent while one test runs long; the heartbeat says which and how far
(tests/support/heartbeat.py, wired in tests/conftest.py)."""

from __future__ import annotations

import io
import time

from tests.support.heartbeat import Heartbeat


def _lines(out: io.StringIO) -> list[str]:
    return [line for line in out.getvalue().splitlines() if line]


def test_a_long_test_is_named_with_its_time_and_the_run_so_far() -> None:
    out = io.StringIO()
    beat = Heartbeat(out, every=0.2)
    try:
        beat.total = 12
        beat.finished()  # one test already done
        beat.started("tests/test_x.py::test_slow")
        time.sleep(0.75)
    finally:
        beat.close()
    lines = _lines(out)
    assert len(lines) >= 2, lines
    assert all(line.startswith("[still on tests/test_x.py::test_slow: ")
               and "; 1 of 12 tests done, 0:00 in]" in line for line in lines), lines


def test_nothing_between_tests_nor_for_a_quick_one() -> None:
    out = io.StringIO()
    beat = Heartbeat(out, every=0.3)
    try:
        time.sleep(0.4)  # no test running
        beat.started("tests/test_x.py::test_quick")
        time.sleep(0.1)
        beat.finished()
        time.sleep(0.4)
    finally:
        beat.close()
    assert _lines(out) == []
