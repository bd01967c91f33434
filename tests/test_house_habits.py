"""Habits that keep the house from drifting (issue #41): one wait-until-ready helper, and the
README's test count stated once and checked against what pytest collects."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from testkit import harness
from tests.conftest import REPO
from tests.support import prometheus

COUNT = re.compile(r"([\d,]+) tests\b")
"""A stated test count: ``1,925 tests``."""


def test_one_wait_until_ready_helper() -> None:
    """``testkit.harness.wait_http`` is the only poll-until-200 loop; the stack script and the
    Prometheus test support use it."""
    defined = [f"{path.relative_to(REPO)}:{node.lineno}"
               for top in ("exporter", "mixin", "tests", "testkit", "bench", "scripts")
               for path in sorted((REPO / top).rglob("*.py"))
               for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
               and node.name == "wait_http"]
    assert defined == [f"testkit/harness.py:{harness.wait_http.__code__.co_firstlineno}"]
    assert prometheus.wait_http is harness.wait_http
    assert "from testkit.harness import wait_http" in (REPO / "scripts" / "stack.py").read_text()


def _collected() -> int:
    """What ``pytest --collect-only`` counts, as ``make test`` would run it."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    found = re.fullmatch(r"(\d+) tests? collected(.*) in [\d.]+s", summary)
    assert done.returncode == 0 and found, done.stdout[-2000:] + done.stderr[-2000:]
    if found.group(2):  # a module skipped at collection (an optional package missing)
        pytest.skip(f"not every test module was collected here: {summary}")
    return int(found.group(1))


def test_the_readme_states_the_test_count_once_and_right() -> None:
    readme = (REPO / "README.md").read_text()
    stated = [(readme.count("\n", 0, m.start()) + 1, int(m.group(1).replace(",", "")))
              for m in COUNT.finditer(readme)]
    assert len(stated) == 1, f"state the test count once in README.md, not at lines {stated}"
    line, count = stated[0]
    collected = _collected()
    assert count == collected, (f"README.md:{line} says {count:,} tests, pytest collects "
                                f"{collected:,}: write {collected:,}")
