"""The mixin reads the exporter's vocabularies instead of spelling them again (issue #41):
the engines' TTFT histogram names come from the engine tables, the regimes from the model.
It may import only such declarations, never the daemon or a backend, so generating the
rules and dashboards stays a pure, light step."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import yaml

from exporter.sources.serving.engines import TABLES, ttft_histograms
from mixin import names as N
from tests.conftest import REPO

DECLARATIONS = {"exporter.model.regimes", "exporter.model.straggler",
                "exporter.sources.serving.engines"}
"""The exporter modules the mixin may read: data, no I/O."""
BACKENDS = ("pynvml", "aiohttp", "kubernetes", "grpc", "prometheus_client", "exporter.daemon")


def _imports_of_exporter() -> dict[str, str]:
    found = {}
    for path in sorted((REPO / "mixin").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):  # `from exporter.model import regimes`
                modules = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in
                           DECLARATIONS else node.module or "" for a in node.names]
            else:
                continue
            found.update({m: f"{path.relative_to(REPO)}:{node.lineno}" for m in modules
                          if m == "exporter" or m.startswith("exporter.")})
    return found


def test_the_mixin_imports_only_declarations_of_the_exporter() -> None:
    imported = _imports_of_exporter()
    assert set(imported) <= DECLARATIONS, imported
    assert set(imported) == DECLARATIONS  # both vocabularies are read, not copied


def test_generating_loads_no_backend() -> None:
    code = ("import sys, mixin.__main__, mixin.render; "
            f"print([m for m in sys.modules if m.split('.')[0] in {BACKENDS!r} "
            f"or m in {BACKENDS!r}])")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_ttft_histograms_are_engine_markers_labelled_by_model() -> None:
    """The rule sums by ``model_name``: each histogram is declared by engine tables that
    read the model from that label."""
    for name in ttft_histograms():
        owners = [t for t in TABLES if t.ttft == name]
        assert owners, name
        assert all("model_name" in t.model_labels for t in owners), name


def test_the_ttft_rule_reads_the_declared_histograms() -> None:
    groups = yaml.safe_load((REPO / "alerts" / "goodput.rules.yml").read_text())["groups"]
    rule = next(r for g in groups for r in g["rules"] if r.get("record") == N.MODEL_TTFT_BUCKET)
    read = re.search(r'__name__=~"([^"]+)"', rule["expr"])
    assert read is not None
    assert read.group(1).split("|") == [f"{name}_bucket" for name in ttft_histograms()]
    dashboards_doc = (REPO / "docs" / "dashboards.md").read_text()
    assert "declares its `ttft`" in dashboards_doc  # where to look, not a second list


def test_no_mixin_module_spells_an_engine_family() -> None:
    spelled = [f"{path.relative_to(REPO)}:{node.lineno}"
               for path in sorted((REPO / "mixin").rglob("*.py"))
               for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
               if isinstance(node, ast.Constant) and isinstance(node.value, str)
               and "time_to_first_token" in node.value]
    assert spelled == []
