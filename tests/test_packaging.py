"""pyproject.toml states its license as an SPDX expression (PEP 639), so building or
installing prints no setuptools deprecation warning about a TOML-table license."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO


def test_license_is_an_spdx_string_and_setuptools_is_new_enough() -> None:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"
    # setuptools reads the SPDX string from 77.0 on; an older one would reject it.
    assert "setuptools>=77" in meta["build-system"]["requires"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(the wheel built from a copy of the sources, the build's output)."""
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} predates SPDX license strings")
    tmp_path = tmp_path_factory.mktemp("wheel")
    # A copy, so the build's own folders stay out of the checkout.
    source = tmp_path / "src"
    shutil.copytree(REPO / "exporter", source / "exporter",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(tmp_path), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    return next(tmp_path.glob("*.whl")), build.stdout + build.stderr


def test_building_prints_no_license_warning(wheel: tuple[Path, str]) -> None:
    path, output = wheel
    assert "license" not in output.lower()
    with zipfile.ZipFile(path) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        assert "License-Expression: Apache-2.0" in archive.read(metadata).decode()


def test_the_wheel_carries_every_runbook(wheel: tuple[Path, str]) -> None:
    """The daemon serves the runbooks from its own package (/runbooks/): an installed
    exporter without them would answer every alert's link with a 404."""
    with zipfile.ZipFile(wheel[0]) as archive:
        shipped = {n for n in archive.namelist() if n.startswith("exporter/runbooks/")}
        for page in sorted((REPO / "exporter" / "runbooks").glob("*.md")):
            name = f"exporter/runbooks/{page.name}"
            assert name in shipped
            assert archive.read(name).decode() == page.read_text()
    assert len(shipped) >= 19
