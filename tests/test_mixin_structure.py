"""The mixin's source stays in small named pieces (issue #32): every function fits on a
screen, and every recorded series' name is spelled once (mixin/names.py), so a rename is
one edit and a typo cannot leave a panel silently empty."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

from mixin import names

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "mixin").rglob("*.py"))
MAX_LINES = 60
RECORDED = re.compile(r"goodput:[a-z0-9_]+(?::[a-z0-9_]+)?")


def _functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}",
             (node.end_lineno or node.lineno) - node.lineno + 1)
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _string_literals(path: Path) -> list[str]:
    """Every string constant of the module, the literal parts of f-strings included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_every_function_is_under_sixty_lines() -> None:
    long = [f"{name}: {lines} lines" for path in SOURCES for name, lines in _functions(path)
            if lines >= MAX_LINES]
    assert long == []


def test_no_recorded_name_is_spelled_twice() -> None:
    seen: dict[str, list[str]] = {}
    for path in SOURCES:
        for text in _string_literals(path):
            for name in RECORDED.findall(text):
                seen.setdefault(name, []).append(str(path.relative_to(ROOT)))
    twice = {name: where for name, where in seen.items() if len(where) > 1}
    assert twice == {}
    assert all(where == ["mixin/names.py"] for where in seen.values()), seen


def test_names_cover_every_recorded_rule() -> None:
    rules = yaml.safe_load((ROOT / "alerts" / "goodput.rules.yml").read_text())
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"]}
    declared = {value for key, value in vars(names).items()
                if key.isupper() and isinstance(value, str)}
    assert recorded == declared


def test_the_checks_see_what_they_look_for() -> None:
    """The two checks above would pass vacuously on a parse that finds nothing."""
    assert len(SOURCES) > 10
    assert sum(len(_functions(p)) for p in SOURCES) > 100
    assert "goodput:gpu_utilization:ratio_rate5m" in _string_literals(ROOT / "mixin" /
                                                                       "names.py")


def test_go_templates_are_written_as_they_read() -> None:
    """Annotation and legend templates go through mixin.templates.fill or plain strings, never
    f-strings with hand-doubled braces (`{{{{ $labels.gpu }}}}`)."""
    doubled = [f"{path.relative_to(ROOT)}:{i}" for path in SOURCES
               for i, line in enumerate(path.read_text().splitlines(), 1) if "{{{{" in line]
    assert doubled == []
