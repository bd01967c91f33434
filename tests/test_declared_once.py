"""What a job source, a regime or a serving engine is, and everything about it that decides
behaviour, is declared with it (issue #52): no module keeps a list of their names, the model,
the mixin and the views read the declarations' properties, and the test lists that once
restated them are derived from them.

The scan reads every module of the code (AST, not text): a list, tuple, set or dict literal
that spells two or more declared names (as strings, or as constants that stand for them) is
a second list, and a new source, regime or engine would be missing from it."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from exporter.model import regimes, straggler
from exporter.model.config import ModelConfig
from exporter.readings import JobSource
from exporter.sources.jobs import identity
from exporter.sources.serving import engines
from mixin.config import load as load_mixin
from tests.conftest import REPO
from tests.test_job_ranking import declared as job_sources

CODE = ("exporter", "mixin", "testkit", "scripts")
"""Where a second list could hide: the code. Tests and benchmarks pick names by case (the
regime a workload should show); the test lists that restated declarations derive them now
(tests/test_job_ranking.py, tests/test_registry.py, tests/test_collectors.py)."""

DECLARATIONS = {
    "exporter/model/regimes.py": "the regimes (ALL)",
    "exporter/sources/serving/engines.py": "the engines' alias tables (TABLES)",
}
"""Modules whose collections are the declarations themselves."""


def vocabularies() -> dict[str, frozenset[str]]:
    """Each declared vocabulary: its names."""
    return {
        "job source": frozenset(job_sources()),
        "regime": frozenset(regimes.NAMES),
        "engine": frozenset(engines.ENGINE_NAMES),
    }


def _constants() -> dict[str, str]:
    """Identifiers that stand for a declared name (``IDLE``, ``SLURM``, ``VLLM_V1``...), as
    the declaring modules and the model's re-exports spell them."""
    from exporter.model import core

    out: dict[str, str] = {}
    for module in (regimes, core, identity, engines):
        for key, value in vars(module).items():
            if not key.isupper() or key.startswith("_"):
                continue
            if isinstance(value, str) and value in regimes.NAMES:
                out[key] = value
            elif isinstance(value, JobSource):
                out[key] = value.name
            elif isinstance(value, engines.EngineTable):
                out[key] = value.engine
    return out


def _items(node: ast.AST) -> list[ast.AST]:
    """The elements a literal collection lists: a dict's keys and values, a sequence's
    items (a tuple item's first element: rows of a table)."""
    if isinstance(node, ast.Dict):
        return [*(k for k in node.keys if k is not None), *node.values]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e.elts[0] if isinstance(e, ast.Tuple) and e.elts else e for e in node.elts]
    return []


def _named(item: ast.AST, constants: Mapping[str, str]) -> set[str]:
    if isinstance(item, ast.Constant) and isinstance(item.value, str):
        return {item.value}
    if isinstance(item, ast.Name):
        return {constants[item.id]} if item.id in constants else set()
    if isinstance(item, ast.Attribute):
        return {constants[item.attr]} if item.attr in constants else set()
    return set()


def _alternatives(node: ast.AST) -> set[str]:
    """The names a PromQL or regex alternation spells in one string: ``"a|b"``, ``a|b`` in
    ``regime=~"a|b"``."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and "|" in node.value):
        return set()
    return {part for piece in node.value.split("|") for part in re.split(r'["(){}\s=~]', piece)}


def second_lists(root: Path, tops: Iterable[str] = CODE) -> list[str]:
    """``path:line vocabulary: names`` of every literal collection spelling two or more names
    of one vocabulary outside its declaration."""
    vocab, constants = vocabularies(), _constants()
    found: list[str] = []
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            rel = str(path.relative_to(root))
            if rel in DECLARATIONS or "_pb2" in rel:
                continue
            tree = ast.parse(path.read_text(), filename=rel)
            for node in ast.walk(tree):
                if not isinstance(node, ast.expr):
                    continue
                spelled = _alternatives(node) or {
                    n for item in _items(node) for n in _named(item, constants)}
                for kind, names in vocab.items():
                    if len(spelled & names) >= 2:
                        found.append(f"{rel}:{node.lineno} {kind}: {sorted(spelled & names)}")
    return sorted(found)


def test_no_module_keeps_a_list_of_declared_names() -> None:
    assert second_lists(REPO) == []


def test_the_scan_finds_a_second_list(tmp_path: Path) -> None:
    """It would pass vacuously if it could not see one: by string, by constant, by dict key."""
    (tmp_path / "exporter").mkdir()
    (tmp_path / "exporter" / "a.py").write_text(
        'A = frozenset({"slurm", "mpi"})\n'
        "B = (LAUNCH_BOUND, regimes.HOST_BOUND)\n"
        'C = {"vllm": 1, "sglang": 2}\n'
        'D = ("slurm", "other")\n'
        "E = {'SLURM_JOB_ID': SLURM, 'PMIX_NAMESPACE': MPI}\n"
        "F = f'{util} unless on (gpu) x{{regime=~\"comm_wait|transfer_bound\"}}'\n")
    assert [f.split(" ")[0] for f in second_lists(tmp_path, ("exporter",))] == [
        "exporter/a.py:1", "exporter/a.py:2", "exporter/a.py:3", "exporter/a.py:5",
        "exporter/a.py:6"]


def test_every_job_source_read_from_the_environment_is_declared_where_it_is_read() -> None:
    """identity.py reads the variables of the sources it declares: one declared elsewhere
    with variables would never be read."""
    here = [v for v in vars(identity).values() if isinstance(v, JobSource)]
    for source in job_sources().values():
        if source.variables:
            assert any(source is v for v in here), source
    assert set(identity.environment()) == {
        v for s in job_sources().values() for v in s.variables}


def test_the_regime_properties_agree() -> None:
    """A waiting rank's hollow time is read where it can show the regime; quiet is not busy;
    a wall or a moving-data regime is busy."""
    for r in regimes.ALL:
        assert not r.can_wait or r.hollow_read, r.name
        assert r.quiet is not r.busy
        assert not (r.wall or r.moves_data) or r.busy, r.name


def test_the_straggler_gap_is_declared_once() -> None:
    """The model's default and the rule's threshold are the one declaration; the mixin's
    configuration file does not spell it again."""
    assert ModelConfig().straggler_gap == straggler.GAP
    assert load_mixin().alerts["GPUJobStraggler"].thresholds["min_waiting_gap"] == straggler.GAP
    config = yaml.safe_load((REPO / "mixin" / "config.yaml").read_text())
    assert "thresholds" not in config["alerts"]["GPUJobStraggler"]
    assert load_mixin({"alerts": {"GPUJobStraggler": {"thresholds": {
        "min_waiting_gap": 0.1}}}}).alerts["GPUJobStraggler"].thresholds == {
            "min_waiting_gap": 0.1}
