"""Fault battery, fairness and exact counts ([fair], issue 39): one tenant's targets cannot
starve another's, every token a client received is counted once, and every value that
enters from outside passes a cap.

Each case drives the real part (the real serving source against engines on loopback, the
daemon as a subprocess, the config layers) through the hostile or careless input the
issue names, and asserts what the operator and the other tenants see.
"""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from exporter import config
from exporter.section import MAX_SETTING_CHARS
from tests.test_fault_battery import REPO, ops_one_line_exit_2, ops_run

BIG = "x" * 100_000
"""100 KB: what a careless template or a hostile value may put anywhere."""


# --- every value from outside is capped ---------------------------------------------------


def _sections(annotation: Any) -> list[type[BaseModel]]:
    """The settings sections an annotation holds (a section, an optional one, a list)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [s for arg in typing.get_args(annotation) for s in _sections(arg)]


def outside_settings(model: type[BaseModel] = config.Settings) -> Iterator[tuple[str, ...]]:
    """The path of every leaf setting, through nested sections and lists of them."""
    for name, field in model.model_fields.items():
        inner = _sections(field.annotation)
        if not inner:
            yield (name,)
        for section in inner:
            step = (name, "0") if typing.get_origin(field.annotation) is list else (name,)
            for rest in outside_settings(section):
                yield (*step, *rest)


def tree_of(path: tuple[str, ...], leaf: Any) -> Any:
    """The settings tree that sets ``path`` (list steps as one-item lists) to ``leaf``."""
    if not path:
        return leaf
    if path[0] == "0":
        return [tree_of(path[1:], leaf)]
    return {path[0]: tree_of(path[1:], leaf)}


def _refused_naming(exc: pytest.ExceptionInfo[config.ConfigError], path: tuple[str, ...]) -> None:
    text = str(exc.value)
    assert "\n" not in text and len(text) < 400, text[:400]
    assert ".".join(path) in text, text


SETTINGS = sorted(set(outside_settings()))


def test_the_enumeration_covers_every_string_setting() -> None:
    """Not a vacuous list: it reaches the nested target credentials and the top keys."""
    assert ("node_name",) in SETTINGS and ("listen",) in SETTINGS
    assert ("serving", "targets", "0", "authorization", "credentials_file") in SETTINGS
    assert ("serving", "annotation_prefix") in SETTINGS and len(SETTINGS) > 100


@pytest.mark.parametrize("path", SETTINGS, ids=".".join)
@pytest.mark.parametrize("layer", ["flag", "environment", "file"])
def test_every_setting_at_100kb_is_refused_naming_it(
    tmp_path: Path, path: tuple[str, ...], layer: str,
) -> None:
    """Each setting, from each layer, at 100 KB: one short line naming the key (before:
    serving.annotation_prefix, the credentials' file names, dict keys and more went
    through whole)."""
    values: list[Any] = [BIG, [BIG], {BIG: 1}] if layer == "flag" else [BIG]
    for value in values:
        tree = tree_of(path, value)
        with pytest.raises(config.ConfigError) as exc:
            if layer == "flag":
                config.build(tree, environ={})
            elif layer == "file":
                cfg = tmp_path / "c.yml"
                cfg.write_text(yaml.safe_dump(tree))
                config.build({}, environ={}, config_file=str(cfg))
            else:
                head, rest = path[0], path[1:]
                key = f"GOODPUT_{head.upper()}" + (f"__{rest[0].upper()}" if rest else "")
                inner = tree_of(rest[1:], value) if rest else value
                text = inner if isinstance(inner, str) else yaml.safe_dump(
                    inner, default_flow_style=True, width=10**9).strip()
                config.build({}, environ={key: text})
        assert path[0] in str(exc.value)
        if isinstance(value, str):
            _refused_naming(exc, path)


def test_a_long_list_of_short_values_is_refused() -> None:
    with pytest.raises(config.ConfigError, match="kubernetes.resource_names"):
        config.build({"kubernetes": {"resource_names": ["a"] * 50_000}}, environ={})


def test_a_100kb_node_name_from_the_environment_is_one_line_and_exit_2() -> None:
    """$NODE_NAME bypassed the 253-character cap (a 13.2 MB /metrics for one GPU)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "NODE_NAME": BIG}
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", "--simulate-gpus", "1",
         "--listen", "127.0.0.1:0"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=30, check=False,
    )
    ops_one_line_exit_2(proc, "node_name")
    assert len(proc.stderr) < 400


def test_100kb_file_paths_are_one_line_and_exit_2() -> None:
    ops_one_line_exit_2(ops_run("--config", BIG), "config file path", str(MAX_SETTING_CHARS))
    ops_one_line_exit_2(ops_run("--web-config-file", BIG), "web config file path")
