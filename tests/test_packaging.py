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


def test_building_prints_no_license_warning(tmp_path: Path) -> None:
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} predates SPDX license strings")
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
    assert "license" not in (build.stdout + build.stderr).lower()
    wheel = next(tmp_path.glob("*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        assert "License-Expression: Apache-2.0" in archive.read(metadata).decode()
