"""Settings are composed from the collector registry: importing the config loads every
collector's declaration (its section class lives there) but none of their sources, and the
exporter's modules import each other without a circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from exporter import collectors
from exporter.settings import names
from exporter.sources.serving import engines
from exporter.wiring.config import Settings, compose
from tests.conftest import REPO


def _with_packages(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


# What importing the settings may load: the registry, the declarations, the readings they
# name, the section base and core keys, each section's own module (next to its code, with
# its package's empty __init__), the profiling mode list and the GPU selection's parser.
ALLOWED = {
    "exporter", "exporter.settings", "exporter.wiring", "exporter.wiring.config",
    "exporter.settings.core",
    "exporter.settings.config_messages", "exporter.settings.names",
    "exporter.settings.yamlfile", "exporter.settings.devices",
    "exporter.settings.section", "exporter.readings",
    "exporter.collectors", "exporter.collectors.base", "exporter.sources",
    "exporter.sources.profiling", "exporter.sources.profiling.modes",
    # declarations a section reads its defaults and help from: the straggler gap the rules
    # share, the environment variables the job sources declare
    "exporter.model.straggler", "exporter.sources.jobs.identity",
    *(f"exporter.collectors.{name}" for name in names.COLLECTOR_NAMES),
    *(m for c in collectors.REGISTRY if c.config for m in _with_packages(c.config.__module__)),
}


def test_importing_config_loads_declarations_but_no_source() -> None:
    probe = (
        "import sys, exporter.wiring.config; "
        "print('\\n'.join(m for m in sys.modules if m.startswith(('exporter', 'grpc', "
        "'aiohttp', 'prometheus_client', 'pynvml'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "exporter.wiring.config" in out
    assert set(out) <= ALLOWED, sorted(set(out) - ALLOWED)


def test_settings_have_one_section_per_collector_that_declares_one() -> None:
    sections = {c.section: c.config for c in collectors.REGISTRY if c.section}
    assert {k: Settings.model_fields[k].annotation for k in sections} == sections
    assert Settings.model_fields.keys() == compose(collectors.REGISTRY).model_fields.keys()


def test_the_composition_names_no_section() -> None:
    """Issue 41: the type checker's copy of the composed ``Settings`` (one field per section,
    edited by every new collector and held to the registry by a test) is not needed:
    typed code reads a section by its type, and exporter/wiring/config.py names none."""
    source = (REPO / "exporter" / "wiring" / "config.py").read_text()
    (stub,) = [n for n in ast.walk(ast.parse(source))
               if isinstance(n, ast.ClassDef) and n.name == "Settings"]
    assert not [n for n in stub.body if isinstance(n, ast.AnnAssign)], "no fields spelled out"
    named = {c.config.__name__ for c in collectors.REGISTRY if c.config}
    assert not [name for name in named if name in source]


def test_the_exporter_reads_a_section_by_its_type() -> None:
    """``settings.serving`` is untyped for the type checker (the stub above); the exporter's
    own code reads ``settings.section(ServingConfig)``, which is typed."""
    sections = {c.section for c in collectors.REGISTRY if c.section}
    found = []
    for path in (REPO / "exporter").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr in sections
                    and isinstance(node.value, (ast.Name, ast.Attribute))
                    and ast.unparse(node.value).endswith("settings")):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {ast.unparse(node)}")
    assert not found, found


def test_engine_names_come_from_the_engine_tables() -> None:
    assert frozenset(t.engine for t in engines.TABLES) == engines.ENGINE_NAMES


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path, known: set[str]) -> set[str]:
    """Modules of ``known`` that ``path`` imports when it is imported (not inside functions
    or ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        names_: list[str] = []
        if isinstance(node, ast.Import):
            names_ = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names_ = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found.update(n for n in names_ if n in known)
    return found


def test_no_import_circles() -> None:
    files = {_module(p): p for p in (REPO / "exporter").rglob("*.py")}
    graph = {m: _top_level_imports(p, set(files)) for m, p in files.items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import circle: " + " -> ".join([*path, module]))
        if module in done:
            return
        for dep in sorted(graph[module]):
            visit(dep, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
