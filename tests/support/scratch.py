"""A scratch checkout: this one's package with new collector modules added the way a
contributor's commit adds them, to run and check as that commit would be (issue #41).

A new collector is one module, ``exporter/collectors/<name>.py``, and one registry line,
its name in ``COLLECTOR_NAMES`` (``exporter/settings/names.py``); nothing is patched at run
time. The copy holds ``exporter/`` and the two generated references the checks compare
(docs/settings.md, docs/metrics.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from testkit.harness import REPO, child_env

GENERATED = ("docs/settings.md", "docs/metrics.md")


def checkout(dest: Path, added: Mapping[str, Path]) -> Path:
    """``dest`` holding a copy of the package with each ``added`` module as
    ``exporter/collectors/<name>.py`` and its registry line; returns ``dest``."""
    shutil.copytree(REPO / "exporter", dest / "exporter",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for doc in GENERATED:
        (dest / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / doc, dest / doc)
    for name, module in added.items():
        shutil.copy(module, dest / "exporter" / "collectors" / f"{name}.py")
        add_registry_line(dest, name)
    return dest


def add_registry_line(root: Path, name: str) -> None:
    """One more name at the end of ``COLLECTOR_NAMES``: the one line a new collector adds."""
    path = root / "exporter" / "settings" / "names.py"
    text = path.read_text()
    match = re.search(r"COLLECTOR_NAMES: tuple\[str, \.\.\.\] = \((.*?)\n\)", text, re.S)
    assert match, "exporter/settings/names.py: COLLECTOR_NAMES not found"
    path.write_text(text[:match.end(1)] + f', "{name}"' + text[match.end(1):])


def env(root: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment that imports ``exporter`` from ``root``, not from this checkout."""
    return child_env({"PYTHONPATH": str(root), **(extra or {})})


def run(root: Path, *args: str, extra: Mapping[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in ``root`` (``-m exporter ...``, ``-m exporter.docgen.settings``)."""
    return subprocess.run([sys.executable, *args], cwd=root, env=env(root, extra), text=True,
                          capture_output=True, timeout=120, check=False)


def changed(root: Path) -> list[str]:
    """The files of ``root`` that differ from this checkout's, or that it lacks."""
    out = []
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file() or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(root)
        mine = REPO / rel
        if not mine.exists() or mine.read_bytes() != path.read_bytes():
            out.append(str(rel))
    return out
