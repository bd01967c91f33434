"""The regimes are declared once (exporter/model/regimes.py), issue #41: the model, the
exposition, the node dashboard and the views all read that declaration, no module keeps a
list of its own, and adding a regime touches the model, its test and generated files.

The last test adds a regime to a copy of the tree as a contributor would (an edit of the
declaration, no patching at run time), regenerates what is generated and checks which files
changed."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from exporter.model import regimes
from exporter.model.core import REGIMES
from exporter.view.rows import REGIME_WHY
from tests.conftest import REPO

READERS = ("exporter", "mixin", "testkit", "scripts")
"""Where a second list of the regimes could hide (tests and bench pick regimes by case)."""

REAL_ADDITION = {
    "exporter/model/regimes.py": "the declaration: name, words, colour, timeline number, "
    "thresholds",
    "exporter/model/core.py": "the rule in classify() that names it (or model/node.py, when "
    "it needs the GPU's peers)",
    "tests/test_model_regimes.py": "its table test",
    "docs/efficiency.md": "its rule in prose, naming its thresholds (checked here)",
}
"""What a contributor edits by hand to add a regime."""

GENERATED = {
    "dashboards/goodput-node.json": "python -m mixin",
    "docs/metrics.md": "python -m exporter.docgen.metrics",
    "tests/golden/simulated-node.prom": "python -m tests.support.golden --update",
}
"""What they regenerate; nothing else changes."""


def _listed_regimes(node: ast.AST) -> int:
    """How many regimes a list, tuple, set or dict literal spells (by string or constant)."""
    if isinstance(node, ast.Dict):
        items = [k for k in node.keys if k is not None]
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [e.elts[0] if isinstance(e, ast.Tuple) and e.elts else e for e in node.elts]
    else:
        return 0
    names = set()
    for item in items:
        if isinstance(item, ast.Constant) and item.value in regimes.NAMES:
            names.add(item.value)
        elif isinstance(item, (ast.Name, ast.Attribute)):
            attr = item.id if isinstance(item, ast.Name) else item.attr
            if getattr(regimes, attr, None) in regimes.NAMES:
                names.add(getattr(regimes, attr))
    return len(names)


def _second_lists(root: Path) -> list[str]:
    found: list[str] = []
    for top in READERS:
        for path in sorted((root / top).rglob("*.py")):
            if path == root / "exporter" / "model" / "regimes.py":
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            found += [f"{path.relative_to(root)}:{node.lineno}" for node in ast.walk(tree)
                      if isinstance(node, ast.expr)
                      and _listed_regimes(node) >= len(regimes.NAMES) - 2]
    return found


def test_no_module_keeps_its_own_list_of_the_regimes() -> None:
    assert _second_lists(REPO) == []


def test_the_scan_finds_a_second_list(tmp_path: Path) -> None:
    """The scan above would pass vacuously if it could not see one."""
    spelled = ", ".join(f'"{n}": "{n}"' for n in regimes.NAMES)
    constants = ", ".join(f"regimes.{n.upper()}" for n in regimes.NAMES)
    (tmp_path / "exporter").mkdir()
    (tmp_path / "exporter" / "a.py").write_text(f"A = {{{spelled}}}\nB = [{constants}]\n")
    assert _second_lists(tmp_path) == ["exporter/a.py:1", "exporter/a.py:2"]


def test_the_declaration_is_well_formed() -> None:
    names = [r.name for r in regimes.ALL]
    assert len(set(names)) == len(names) and tuple(names) == REGIMES
    assert sorted(r.timeline for r in regimes.ALL) == list(range(len(names)))
    colours = [r.colour for r in regimes.ALL]
    assert len(set(colours)) == len(colours)
    assert all(re.fullmatch(r"#[0-9A-F]{6}", c) for c in colours), colours
    assert all(0 < len(r.why) <= 30 for r in regimes.ALL)  # fits the views' why column
    assert all(re.fullmatch(r"[a-z_]+", n) for n in names)


def _blocks(text: str) -> list[str]:
    """Paragraphs, list items and table rows of a markdown text."""
    out: list[str] = []
    for line in text.splitlines():
        starts = not line.strip() or re.match(r"\s*(\d+\.|-|\|)\s", line)
        if starts or not out:
            out.append("")
        out[-1] += " " + line.strip()
    return out


def test_each_threshold_is_documented_where_its_regime_is() -> None:
    """A regime's thresholds are model settings (docs/settings.md, from their docstrings), and
    docs/efficiency.md names each one (in code, maybe inside a formula) where it describes
    the regime."""
    settings = (REPO / "docs" / "settings.md").read_text()
    blocks = _blocks((REPO / "docs" / "efficiency.md").read_text())
    missing = []
    for regime in regimes.ALL:
        for threshold in regime.thresholds:
            if f"| `model.{threshold}` |" not in settings:
                missing.append(f"{threshold}: not a model setting")
            named = re.compile(rf"`[^`]*\b{threshold}\b[^`]*`")
            if not any(named.search(b) and f"`{regime.name}`" in b for b in blocks):
                missing.append(f"{regime.name}/{threshold}: not in docs/efficiency.md")
    assert missing == []


def test_the_efficiency_doc_lists_the_declared_regimes() -> None:
    line = next(x for x in (REPO / "docs" / "efficiency.md").read_text().splitlines()
                if x.startswith("| `goodput_gpu_regime{regime}`"))
    assert tuple(re.findall(r"`([a-z_]+)`", line.split("|")[2])) == regimes.NAMES


def test_the_readers_show_the_declaration() -> None:
    """The node dashboard's timeline numbers and colours, and the views' words."""
    board = json.loads((REPO / "dashboards" / "goodput-node.json").read_text())
    panel = next(p for p in board["panels"] if p.get("title") == "Regime")
    shown = {opt["text"]: (int(value), opt["color"])
             for m in panel["fieldConfig"]["defaults"]["mappings"]
             for value, opt in m["options"].items()}
    assert shown == {r.name: (r.timeline, r.colour) for r in regimes.ALL}
    assert dict(REGIME_WHY) == {r.name: r.why for r in regimes.ALL}


def _add_a_regime(declaration: Path) -> None:
    """What a contributor writes: one constant and one entry at the end of ``ALL``."""
    text = declaration.read_text()
    tree = ast.parse(text)
    end = next(n for n in tree.body if isinstance(n, ast.AnnAssign)
               and isinstance(n.target, ast.Name) and n.target.id == "ALL").end_lineno
    assert end is not None
    lines = text.splitlines(keepends=True)
    lines.insert(end - 1, '    Regime(SCRATCH_BOUND, "scratch words", "#123456", '
                          f'{len(regimes.ALL)}, ("idle_util_max",),\n'
                          '           busy=False, wall=False, can_wait=False, '
                          'hollow_read=False, moves_data=False),\n')
    text = "".join(lines).replace('UNKNOWN = "unknown"\n',
                                  'UNKNOWN = "unknown"\nSCRATCH_BOUND = "scratch_bound"\n')
    declaration.write_text(text)


def _copy(tmp: Path) -> Path:
    """The parts of the tree the generators read and write."""
    root = tmp / "tree"
    skip = shutil.ignore_patterns("__pycache__")
    for top in ("exporter", "mixin", "dashboards", "alerts", "tests/support", "tests/golden"):
        shutil.copytree(REPO / top, root / top, ignore=skip)
    for name in ("tests/__init__.py", "docs/metrics.md", "docs/settings.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    return root


def _changed(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
            and p.read_bytes() != (REPO / p.relative_to(root)).read_bytes()}


def test_adding_a_regime_touches_the_declaration_and_generated_files(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    _add_a_regime(root / "exporter" / "model" / "regimes.py")
    check = ("import exporter, sys; from exporter.model.core import REGIMES; "
             "from exporter.view.rows import REGIME_WHY; "
             "assert exporter.__file__.startswith(sys.argv[1]), exporter.__file__; "
             "assert REGIMES[-1] == 'scratch_bound' and REGIME_WHY['scratch_bound']")
    for argv in (["-c", check, str(root)], ["-m", "mixin"], ["-m", "exporter.docgen.metrics"],
                 ["-m", "tests.support.golden", "--update"]):
        done = subprocess.run([sys.executable, *argv], cwd=root, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, (argv, done.stderr)
    assert _changed(root) == {"exporter/model/regimes.py", *GENERATED}
    assert all((REPO / path).is_file() for path in REAL_ADDITION)
    for path in GENERATED:
        assert "scratch_bound" in (root / path).read_text(), path
    board = (root / "dashboards" / "goodput-node.json").read_text()
    assert f'regime=\\"scratch_bound\\"}} * {len(regimes.ALL)}' in board
    assert '"color": "#123456"' in board
