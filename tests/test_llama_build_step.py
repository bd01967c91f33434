"""``make llama-server``, the visible step ``make test`` runs before pytest: one line when the
build is cached or cannot run, never minutes of silence."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.support import llamacpp


def _step(cache: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPU_GOODPUT_CACHE": str(cache), "PATH": path}
    return subprocess.run([sys.executable, "-m", "tests.support.llama_build"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def test_a_cached_build_is_announced_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / f"llama-{llamacpp.VERSION}"
    (root / "build" / "bin").mkdir(parents=True)
    (root / "build" / "bin" / "llama-server").write_text("")
    (root / llamacpp.DONE).write_text(llamacpp.VERSION)
    done = _step(tmp_path, os.environ["PATH"])
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        f"llama-server: cached at {root / 'build' / 'bin' / 'llama-server'}"]


def test_without_a_toolchain_it_says_the_tests_are_skipped(tmp_path: Path) -> None:
    done = _step(tmp_path, str(tmp_path))  # no cmake, no compiler on this PATH
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) == 1 and "missing cmake" in done.stdout
    assert "skipped" in done.stdout


def test_the_makefile_runs_it_before_pytest() -> None:
    dry = subprocess.run(["make", "-n", "--no-print-directory", "test"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert dry.index("tests.support.llama_build") < dry.index("-m pytest")
