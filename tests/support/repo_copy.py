"""A copy of the whole repository to follow a recipe in, as a contributor's commit would
(issue #52): the package, the tests, the chart, the mixin, the docs and every generated file,
so the checks that hold the declarations to their readers (the chart's schema, the docs
generated from the registry, the test lists derived from declarations) run there too.

A recipe proof edits the copy only through its files (:func:`replace`, :func:`append`,
:func:`add_collector`; nothing is patched at run time), regenerates what the recipe says
(:func:`regenerate`), runs the area's real tests there (:func:`pytest`) and the real daemon
(:func:`daemon`), then asks which files changed (:func:`changed`). docs/architecture.md's
recipes are tried this way (tests/test_recipes.py).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from testkit.harness import REPO, child_env, module_daemon
from tests.support import scratch

SKIP = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
    "*.egg-info", "build", "dist", ".stack", ".cache", ".llama", ".whl", "*.pyc",
)
"""What a checkout has that a commit does not (.gitignore's list, and git's own)."""

def _make_checks() -> tuple[tuple[str, ...], ...]:
    """The generated-file checks ``make test`` runs (``$(PY) -m <module> --check``), read
    from the Makefile, so a generator that moves is followed, not spelled again here."""
    found = re.findall(r"^\t\$\(PY\) (-m \S+ --check)\s*$", (REPO / "Makefile").read_text(),
                       re.M)
    assert found, "Makefile: no `$(PY) -m <module> --check` line in the test target"
    return tuple(tuple(line.split()) for line in found)


CHECKS: tuple[tuple[str, ...], ...] = _make_checks()
"""The generated-file checks of ``make test`` (the metrics and settings references, the
mixin)."""

GENERATORS: tuple[tuple[str, ...], ...] = (
    *(argv[:-1] for argv in CHECKS),
    ("-m", "tests.support.golden", "--update"),
)
"""Every generated file's generator, as the recipes run them: the checks' generators, and
the simulated node's golden exposition."""


def generators(*words: str) -> tuple[tuple[str, ...], ...]:
    """The generators whose module names one of ``words`` (``"settings"``, ``"mixin"``)."""
    chosen = tuple(g for g in GENERATORS if any(w in g[1] for w in words))
    assert chosen, f"no generator named by {words}: {GENERATORS}"
    return chosen


def whole(dest: Path) -> Path:
    """A copy of this checkout's whole tree (symlinks kept: the chart's ``files/`` point at
    alerts/ and dashboards/) under ``dest``, without what git ignores; returns its root."""
    root = dest / "repo"
    shutil.copytree(REPO, root, symlinks=True, ignore=SKIP)
    return root


def replace(root: Path, path: str, old: str, new: str) -> None:
    """Replace the one occurrence of ``old`` in ``root/path`` with ``new``: a recipe step
    that no longer finds its place fails here, naming the file."""
    file = root / path
    text = file.read_text()
    assert text.count(old) == 1, f"{path}: {old!r} found {text.count(old)} times, not once"
    file.write_text(text.replace(old, new))


def append(root: Path, path: str, text: str) -> None:
    """``text`` added at the end of ``root/path`` (created if missing)."""
    file = root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    before = file.read_text() if file.exists() else ""
    file.write_text(before + text)


def add_collector(root: Path, name: str, module: Path) -> None:
    """A collector's recipe: ``module`` as ``exporter/collectors/<name>.py`` and its name in
    the registry (``exporter/settings/names.py``)."""
    shutil.copy(module, root / "exporter" / "collectors" / f"{name}.py")
    scratch.add_registry_line(root, name)


def env(root: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment whose ``python`` imports the copy's packages, not this checkout's."""
    return child_env({"PYTHONPATH": str(root), **(extra or {})})


def run(root: Path, *args: str, timeout: float = 180,
        extra: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in the copy (this interpreter, the copy's code)."""
    return subprocess.run([sys.executable, *args], cwd=root, env=env(root, extra), text=True,
                          capture_output=True, timeout=timeout, check=False)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    """``done``'s output, after asserting it succeeded (the output is the message if not)."""
    said = f"{done.stdout}\n{done.stderr}"[-6000:]
    assert done.returncode == 0, f"{done.args}: exit {done.returncode}\n{said}"
    return done.stdout


def pytest(root: Path, *args: str, timeout: float = 300) -> str:
    """The copy's own tests (``tests/test_x.py``, ``-k``...), asserted to pass; their output."""
    return ok(run(root, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *args,
                  timeout=timeout))


def regenerate(root: Path, generators: tuple[tuple[str, ...], ...] = GENERATORS) -> None:
    """Run every generator in the copy, as the recipes say, asserting each succeeds."""
    for argv in generators:
        ok(run(root, *argv))


def check(root: Path) -> None:
    """The generated-file checks of ``make test``, in the copy."""
    for argv in CHECKS:
        ok(run(root, *argv))


changed = scratch.changed
"""The files of the copy that differ from this checkout's, or that it lacks, sorted."""


@contextmanager
def daemon(root: Path, *args: str, timeout: float = 30.0) -> Iterator[str]:
    """The copy's daemon (``python -m exporter ARGS`` on a free loopback port), its base URL
    once ready."""
    with module_daemon("exporter", *args, timeout=timeout, root=root) as url:
        yield url
