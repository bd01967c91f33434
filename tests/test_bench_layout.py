"""bench/ stays organised: scripts in folders by purpose, each one listed in bench/README.md,
run as modules (no sys.path tricks), and code shared with the tests taken from testkit/, so
neither bench/ nor tests/ imports the other."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

BENCH = REPO / "bench"
FOLDERS = {"fleet", "footprint", "gpu", "serving", "soak"}


def _scripts() -> list[str]:
    return sorted(
        str(p.relative_to(BENCH))
        for p in BENCH.rglob("*")
        if p.suffix in (".py", ".sh") and p.name != "__init__.py" and "__pycache__" not in p.parts
    )


def test_every_script_sits_in_a_folder_by_purpose_and_is_in_the_readme() -> None:
    readme = (BENCH / "README.md").read_text()
    loose = [s for s in _scripts() if "/" not in s or s.split("/")[0] not in FOLDERS]
    assert not loose, f"put these in one of {sorted(FOLDERS)}: {loose}"
    unlisted = [s for s in _scripts() if f"`{s.split('/')[-1]}`" not in readme]
    assert not unlisted, f"say what these measure in bench/README.md: {unlisted}"


def test_no_script_edits_sys_path() -> None:
    hacks = [
        s
        for s in _scripts()
        if s.endswith(".py")
        and re.search(r"sys\.path\.insert\(0, str\((HERE|ROOT|REPO|BENCH)", (BENCH / s).read_text())
    ]
    assert not hacks, f"run these as modules instead of editing sys.path: {hacks}"


def test_test_support_does_not_import_bench() -> None:
    importers = [
        p.name
        for p in (REPO / "tests" / "support").glob("*.py")
        if re.search(r"^\s*(from|import) bench\b", p.read_text(), re.M)
    ]
    assert not importers, importers


def _importers(root: Path, package: str) -> list[str]:
    pattern = re.compile(rf"^\s*(from|import) {package}\b", re.M)
    return sorted(str(p.relative_to(REPO)) for p in root.rglob("*.py")
                  if pattern.search(p.read_text()))


def test_bench_imports_nothing_from_tests() -> None:
    importers = _importers(BENCH, "tests")
    assert not importers, f"move what these need from tests/ to testkit/: {importers}"


def test_testkit_imports_neither_bench_nor_tests() -> None:
    importers = _importers(REPO / "testkit", "bench") + _importers(REPO / "testkit", "tests")
    assert not importers, importers
