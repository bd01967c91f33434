"""config.py validates against names in the leaf exporter/names.py instead of importing
the collectors and sources (which import config): no import loop, and each name list still
matches the code that defines the thing."""

from __future__ import annotations

import subprocess
import sys

from exporter import collectors, names
from exporter.sources.profiling import modes
from exporter.sources.serving import engines
from tests.conftest import REPO


def test_importing_config_imports_no_collector_or_source() -> None:
    probe = (
        "import sys, exporter.config; "
        "print('\\n'.join(m for m in sys.modules if m.startswith('exporter')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "exporter.config" in out
    assert not [m for m in out if m == "exporter.collectors" or m.startswith("exporter.sources")]
    # exporter/yamlfile.py is a leaf too (the bounded YAML loader, no exporter imports).
    assert set(out) <= {"exporter", "exporter.config", "exporter.names", "exporter.yamlfile"}


def test_the_leaf_names_match_their_definitions() -> None:
    assert names.COLLECTOR_NAMES == collectors.NAMES
    assert frozenset(t.engine for t in engines.TABLES) == names.ENGINE_NAMES
    assert modes.MODES == names.MODES
