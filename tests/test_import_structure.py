"""The house's import structure (issue #41): no import circle, no arrow running up a layer,
the composition root on top, and a top level of a few shared modules beside role-named
packages. Every import counts: at module level, inside functions (a builder's lazy import
is still an arrow) and under ``if TYPE_CHECKING:``.

The layers, highest first. A module may import its own layer and the layers below it,
never one above: the composition root imports the registry, the registry the model and the
sources, and nothing below the root imports it (a section or a type reached through
``exporter/wiring/config.py`` would be such an arrow)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("commands", ("exporter.__main__", "exporter.cli", "exporter.docgen")),
    ("composition root", ("exporter.wiring",)),
    ("registry", ("exporter.collectors",)),
    ("scheduling, web and views", ("exporter.runtime", "exporter.web", "exporter.view")),
    ("model", ("exporter.model",)),
    ("sources", ("exporter.sources", "exporter.sim")),
    ("exposition", ("exporter.metrics",)),
    ("settings schema", ("exporter.settings",)),
    ("shared contracts", ("exporter.snapshot", "exporter.readings")),
    ("foundations", ("exporter.process", "exporter.runbooks", "exporter.util", "exporter.urls",
                     "exporter")),
)
"""Each entry a folder of exporter/ or one of its own few modules, never a module inside a
folder: a folder lies in one layer (issue #52), so the layers are what the tree shows.
``exporter`` alone is its ``__init__`` (the version), a foundation."""

MAX_TOP_LEVEL_MODULES = 6
"""exporter/'s own modules beside its packages (``__init__`` not counted)."""


def modules(root: Path) -> dict[str, Path]:
    """Every module of ``root``/exporter by dotted name (a package by its own name)."""
    out = {}
    for path in (root / "exporter").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(node: ast.AST, package: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            up = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*up, base] if base else up)
        yield base
        yield from (f"{base}.{alias.name}" for alias in node.names)


def graph(root: Path) -> dict[str, set[str]]:
    """module -> the exporter modules it imports anywhere in its file. An import of a
    package that only carries a docstring is not counted (it is a folder, not code)."""
    files = modules(root)
    empty = {m for m, p in files.items()
             if p.name == "__init__.py" and not _has_imports(p)}
    edges: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            for name in _imported(node, package):
                while name and name not in files:
                    name = name.rpartition(".")[0]
                if name and name != module and name not in empty:
                    found.add(name)
        edges[module] = found
    return edges


def _has_imports(path: Path) -> bool:
    return any(isinstance(n, (ast.Import, ast.ImportFrom))
               for n in ast.walk(ast.parse(path.read_text())))


def layer(module: str) -> int:
    """The index of ``module``'s layer in :data:`LAYERS` (0 is the top)."""
    best = (-1, len(LAYERS))
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                best = (len(prefix), index)
    return best[1]


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def uphill(edges: dict[str, set[str]]) -> list[str]:
    """Every arrow from a module to one in a higher layer, named with both layers."""
    return [
        f"{a} ({LAYERS[layer(a)][0]}) -> {b} ({LAYERS[layer(b)][0]})"
        for a in sorted(edges) for b in sorted(edges[a]) if layer(b) < layer(a)
    ]


def top_level(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "exporter").glob("*.py") if p.stem != "__init__")


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in modules(REPO) if layer(m) == len(LAYERS)]
    assert not unplaced, f"say which layer these belong to (LAYERS): {unplaced}"


def test_no_import_circle() -> None:
    found = circles(graph(REPO))
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_arrow_runs_up_a_layer() -> None:
    found = uphill(graph(REPO))
    assert not found, "imports from a lower layer up:\n" + "\n".join(found)


def test_nothing_below_the_root_imports_the_composition_root() -> None:
    """The composed settings, the daemon and the CLI are imported by the commands only:
    a section is imported from its own module, never through the settings' composition."""
    root = {m for m in modules(REPO) if LAYERS[layer(m)][0] == "composition root"}
    edges = graph(REPO)
    below = [f"{a} -> {b}" for a in edges if layer(a) > 1 for b in edges[a] & root]
    assert not below, below


INTERFACES = frozenset({"exporter.collectors", "exporter.collectors.base", "exporter.sources.base"})
"""What the composition root may know of the collectors: the registry and the interfaces."""


def test_the_composition_root_names_no_collector() -> None:
    """It wires what the registry returns (issue #52): no source, model or simulator module,
    no collector's declaration or section; what it needs of one (the pod labels copied onto
    every series, the profiling backends' order, the words of the start-up line) the
    collector declares."""
    root = {m for m in modules(REPO) if LAYERS[layer(m)][0] == "composition root"}
    edges = graph(REPO)
    named = [f"{a} -> {b}" for a in sorted(root) for b in sorted(edges[a])
             if b not in INTERFACES and b.startswith(
                 ("exporter.sources", "exporter.model", "exporter.sim", "exporter.collectors"))]
    assert not named, named


def test_every_folder_lies_in_one_layer() -> None:
    """The layers are the folders (issue #52): the table names folders of exporter/ and its
    own modules only, and every module of a folder is in that folder's layer, however deep."""
    top = REPO / "exporter"
    inside = [p for _, prefixes in LAYERS for p in prefixes
              if p != "exporter" and (p.count(".") != 1 or not (
                  (top / p.split(".")[1]).is_dir() or (top / (p.split(".")[1] + ".py")).is_file()))]
    assert not inside, f"not a folder of exporter/ nor one of its modules: {inside}"
    layers_of: dict[str, set[str]] = {}
    for module in modules(REPO):
        parts = module.split(".")
        if len(parts) > 1 and (top / parts[1]).is_dir():
            layers_of.setdefault(parts[1], set()).add(LAYERS[layer(module)][0])
    spanning = {folder: sorted(found) for folder, found in layers_of.items() if len(found) > 1}
    assert not spanning, f"folders spanning layers: {spanning}"
    assert {"docgen", "wiring", "process", "runtime", "settings", "metrics"} <= set(layers_of)


def test_the_top_level_is_a_few_shared_modules() -> None:
    found = top_level(REPO)
    assert len(found) <= MAX_TOP_LEVEL_MODULES, (
        f"{len(found)} modules at exporter/'s top level, at most {MAX_TOP_LEVEL_MODULES}: "
        f"{found}; put a module in the package of its role (docs/architecture.md)")


def test_the_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Type-checking, function-level and relative imports are arrows too; a circle through
    them and an uphill arrow are both caught."""
    pkg = tmp_path / "exporter"
    (pkg / "wiring").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "wiring" / "__init__.py").write_text('"""A folder."""\n')
    (pkg / "readings.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from exporter.wiring.daemon import Daemon\n")
    (pkg / "wiring" / "daemon.py").write_text(
        "def build():\n    from ..readings import Reading\n")
    edges = graph(tmp_path)
    assert edges == {"exporter": set(), "exporter.wiring": set(),
                     "exporter.readings": {"exporter.wiring.daemon"},
                     "exporter.wiring.daemon": {"exporter.readings"}}
    assert circles(edges) == [["exporter.readings", "exporter.wiring.daemon"]]
    assert uphill(edges) == [
        "exporter.readings (shared contracts) -> exporter.wiring.daemon (composition root)"]
