"""The checkout as a newcomer has it right after ``git clone`` and ``make``, for running the
docs' commands exactly as pasted: a scratch copy of the tracked files, whose ``.venv`` is the
tests' own virtualenv, and an environment with no virtualenv activated.

Building a new virtualenv per test would take minutes and the network, so ``.venv`` holds
links to the tests' one plus fresh install stamps (scripts/bootstrap.sh then has nothing to
do, as after a first ``make run``). ``PYTHONPATH`` names the copy: the editable install
points at the original checkout, and in a real clone it points at the clone itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.docsnippets import REPO


def tracked_files(root: Path = REPO) -> list[str]:
    """What a clone of ``root`` has (tracked, and new files not ignored); every file below
    ``root`` except the usual build output where git is not available."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, capture_output=True, check=True, timeout=60).stdout
        return sorted({p for p in listed.decode().split("\0") if p})
    except (OSError, subprocess.SubprocessError):
        skip = {".git", ".venv", ".stack", "__pycache__", ".mypy_cache", ".ruff_cache",
                ".pytest_cache", ".hypothesis", "build", "dist"}
        return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                      if p.is_file() and not skip & set(p.relative_to(root).parts))


def fresh_clone(dest: Path, root: Path = REPO) -> Path:
    """A copy of the checkout in ``dest`` (modes and times kept) with the tests' venv as its
    ``.venv``; returns ``dest``."""
    for rel in tracked_files(root):
        source = root / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    venv = Path(sys.prefix)
    if venv == Path(sys.base_prefix):
        raise RuntimeError("the tests do not run in a virtualenv: nothing to use as .venv")
    (dest / ".venv").mkdir()
    for entry in venv.iterdir():
        if not entry.name.startswith(".installed"):
            (dest / ".venv" / entry.name).symlink_to(entry)
    for stamp in (".installed", ".installed-runtime"):
        (dest / ".venv" / stamp).touch()
    return dest


def plain_env(clone: Path, **extra: str) -> dict[str, str]:
    """This process's environment with no virtualenv on PATH or activated."""
    venv_bins = {str(Path(sys.prefix) / "bin"), str(Path(sys.executable).parent)}
    path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
            if p and p not in venv_bins and not p.startswith(str(clone))]
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "COLUMNS", "LINES")}
    return {**env, "PATH": os.pathsep.join(path), "PYTHONPATH": str(clone), **extra}


@dataclass
class Ran:
    returncode: int
    output: str

    def __str__(self) -> str:
        return f"exit {self.returncode}:\n{self.output[-4000:]}"


def run_as_written(script: str, clone: Path, env: dict[str, str], timeout: float) -> Ran:
    """``script`` through ``bash -euo pipefail`` in ``clone``, as a person pastes it (every
    line must succeed); whatever it left running in the background is stopped after. The
    output goes to a file: a background command keeps a pipe open after bash has exited."""
    log = clone / ".as-written.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=clone,
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
            note = ""
        except subprocess.TimeoutExpired:
            code, note = 124, f"\n(still running after {timeout:.0f} s)"
        finally:
            _stop_group(proc.pid)
            proc.wait()
    return Ran(code, log.read_text(errors="replace") + note)


def _stop_group(pgid: int) -> None:
    """SIGTERM the session's process group, SIGKILL what is left after 10 s."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
