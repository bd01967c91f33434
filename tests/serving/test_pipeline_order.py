"""The serving pipeline reads in one direction (exporter/sources/serving/__init__.py): a stage
imports from the stages before it, never after, so the parser does not depend on the HTTP
client and the ledger knows nothing of how a body was fetched."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "exporter" / "sources" / "serving"
STAGES: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("fetch", "auth"),
    ("exposition", "signals", "engines", "adapter", "scrape"),
    ("accumulate", "account", "state"),
    ("families", "source"),
)
STAGE = {name: i for i, names in enumerate(STAGES) for name in names}


def _siblings(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:3] == ["exporter", "sources", "serving"] and len(parts) > 3:
                found.add(parts[3])
            elif node.module == "exporter.sources.serving":
                found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("module", sorted(STAGE))
def test_a_stage_imports_only_from_earlier_stages(module: str) -> None:
    later = {m for m in _siblings(module) if STAGE.get(m, -1) > STAGE[module]}
    assert not later, f"{module} (stage {STAGE[module]}) imports later stages: {sorted(later)}"


def test_the_parser_does_not_depend_on_the_http_client() -> None:
    assert "fetch" not in _siblings("exposition")
