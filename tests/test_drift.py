"""What the docs name exists, and functions stay short (issue #32: the docs pointed at a
module that had become a package, and a few functions had grown past a screen)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

TOP = ("exporter", "tests", "testkit", "bench", "docs", "mixin", "helm", "scripts", "alerts",
       "dashboards", "deploy")
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(TOP)})/[\w./-]*\w)")
# Records of past runs (docs/validation/) and the changelog name paths as they were then.
DOCS = [REPO / "README.md", REPO / "bench" / "README.md",
        *(p for p in (REPO / "docs").rglob("*.md") if "validation" not in p.parts)]
DOCSTRINGS = [p for top in ("exporter", "testkit", "mixin", "scripts")
              for p in (REPO / top).rglob("*.py") if "_pb2" not in p.name]

MAX_LINES = 60
"""No exception: every function in exporter/ stays under this many lines."""


def _missing(text: str) -> list[str]:
    out = []
    for match in PATH.finditer(text):
        after = text[match.end():match.end() + 2].lstrip("-")
        if after[:1] in ("<", "*", "{"):  # a pattern: core-<gpu>.md, serving-*.md
            continue
        path = match.group(1)  # a module may be named without .py
        if not (REPO / path).exists() and not (REPO / f"{path}.py").exists():
            out.append(path)
    return out


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def test_every_path_the_docs_and_module_docstrings_name_exists() -> None:
    old_records = "## Older records"  # bench/README.md maps the old flat paths on purpose
    missing = {
        str(p.relative_to(REPO)): found
        for p in DOCS + DOCSTRINGS
        if (found := _missing(_docstring(p) if p.suffix == ".py"
                               else p.read_text().split(old_records)[0]))
    }
    assert not missing, f"paths that do not exist: {missing}"


def test_functions_in_exporter_are_under_60_lines() -> None:
    long = {}
    for path in (REPO / "exporter").rglob("*.py"):
        if "_pb2" in path.name:
            continue
        rel = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines >= MAX_LINES:
                    long[f"{rel}:{node.lineno} {node.name}"] = lines
    assert not long, f"split these (at most {MAX_LINES - 1} lines): {long}"
