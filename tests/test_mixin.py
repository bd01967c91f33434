"""The monitoring mixin: the committed rules and dashboards are what it generates, and its
configuration reaches every expression."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from mixin.config import load
from mixin.render import render

ROOT = Path(__file__).resolve().parent.parent
CUSTOM = 'job="custom-goodput", env="prod"'
# Queries the selector cannot reach: the serving engines' own TTFT histograms (scraped from
# the engine pods), and recorded job series (their rule applied the selector; recording by
# job drops the job label).
NOT_EXPORTER = ("time_to_first_token", "goodput:job_")


def generate(tmp: Path, *override: dict[str, Any]) -> Path:
    """`python -m mixin --out tmp [--config override.yml]`, as a user runs it."""
    tmp.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "mixin", "--out", str(tmp)]
    for i, extra in enumerate(override):
        path = tmp / f"override{i}.yml"
        path.write_text(yaml.safe_dump(extra))
        args += ["--config", str(path)]
    result = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    return tmp


def rules(root: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted((root / "alerts").glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                out[rule.get("record") or rule["alert"]] = rule
    return out


def queries(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted((root / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for i, target in enumerate(panel.get("targets", [])):
                out[f"{path.stem}/{panel['title']}/{i}"] = target["expr"]
        for var in board["templating"]["list"]:
            if var["type"] == "query":
                out[f"{path.stem}/${var['name']}"] = var["query"]["query"]
    return out


def test_committed_files_are_regenerated(tmp_path: Path) -> None:
    generated = render(load())
    assert sorted(generated) == sorted(
        [f"alerts/{p.name}" for p in (ROOT / "alerts").glob("*.rules.yml")]
        + [f"dashboards/{p.name}" for p in (ROOT / "dashboards").glob("*.json")])
    stale = [rel for rel, text in generated.items() if (ROOT / rel).read_text() != text]
    assert stale == [], "run `python -m mixin` (make mixin)"
    # --check compares a tree with what it would generate: fine here, and one edit fails it.
    generate(tmp_path)
    check = [sys.executable, "-m", "mixin", "--check", "--out", str(tmp_path)]
    assert subprocess.run(check, cwd=ROOT, check=False, capture_output=True).returncode == 0
    edited = tmp_path / "alerts" / "goodput.rules.yml"
    edited.write_text(edited.read_text().replace("vector(2.5)", "vector(3)"))
    result = subprocess.run(check, cwd=ROOT, check=False, capture_output=True, text=True)
    assert result.returncode == 1 and "goodput.rules.yml" in result.stderr


def test_job_selector_reaches_every_rule_and_query(tmp_path: Path) -> None:
    default = generate(tmp_path / "default")
    custom = generate(tmp_path / "custom", {"selector": CUSTOM})
    base_rules, new_rules = rules(default), rules(custom)
    assert base_rules.keys() == new_rules.keys()
    constants = {name for name, rule in base_rules.items() if "{" not in rule["expr"]}
    assert constants == {"goodput:gpu_hour_price_dollars"}
    # The engines' own TTFT histograms are scraped under the engines' job, not the exporter's.
    engines = {name for name, rule in base_rules.items() if "time_to_first_token" in rule["expr"]}
    assert engines == {"goodput:model_ttft_seconds_bucket:rate5m"}
    for name in base_rules.keys() - constants - engines:
        assert new_rules[name]["expr"] != base_rules[name]["expr"], name
        assert CUSTOM in new_rules[name]["expr"], name
        assert 'job="gpu-goodput-exporter"' not in new_rules[name]["expr"], name
        # Aggregations keep the selector's labels, so recorded series still answer to it.
        if " by (" in new_rules[name]["expr"]:
            assert "cluster, job, env" in new_rules[name]["expr"], name
    base_q, new_q = queries(default), queries(custom)
    assert base_q.keys() == new_q.keys() and len(base_q) > 40
    for key, expr in base_q.items():
        # A query over aggregated recording rules only (per namespace, model, regime): the
        # rules applied the selector, and aggregating dropped the job label. The engines'
        # TTFT reaches exporter series only to scope itself (those carry the selector).
        reads_exporter = re.search(r"\bgoodput_", expr)
        if not reads_exporter and ("goodput:" in expr or any(m in expr for m in NOT_EXPORTER)):
            assert new_q[key] == expr
            continue
        assert new_q[key] != expr and CUSTOM in new_q[key], key


def test_other_settings_reach_the_files(tmp_path: Path) -> None:
    out = generate(tmp_path, {
        "runbook_base_url": "https://wiki.example/gpu/",
        "gpu_hour_price_dollars": 4.25,
        "labels": {"node": "kubernetes_node"},
        "alerts": {"GPUBusyButUnproductive": {"for": "20m",
                                              "thresholds": {"min_utilization": 0.7}}},
        "grafana": {"datasource_uid": "prom-main"},
    })
    got = rules(out)
    for name, rule in got.items():
        if "alert" in rule:
            assert rule["annotations"]["runbook_url"] == f"https://wiki.example/gpu/{name}.md"
            assert "on (cluster, node," not in rule["expr"], name
    assert got["goodput:gpu_hour_price_dollars"]["expr"] == "vector(4.25)"
    busy = got["GPUBusyButUnproductive"]
    assert busy["for"] == "20m" and ">= 0.7" in busy["expr"]
    assert "$labels.kubernetes_node" in busy["annotations"]["summary"]
    board = json.loads((out / "dashboards" / "goodput-node.json").read_text())
    assert board["panels"][1]["datasource"]["uid"] == "prom-main"
    text = (out / "dashboards" / "goodput-node.json").read_text()
    assert "{{kubernetes_node}} gpu {{gpu}}" in text and "{{node}}" not in text
    assert 'kubernetes_node=~\\"$node\\"' in text


@pytest.mark.parametrize("override", [
    {"selector": "{job='x'}"},
    {"labels": {"node": "not a label"}},
    {"alerts": {"GPULost": {"for": "soon"}}},
    {"alerts": {"GPUHostBound": {"thresholds": {"max_utilization": 0.5}}}},
    {"windows": {"rate": "5 minutes"}},
    {"unknown_key": 1},
], ids=["braces", "label", "for", "missing-threshold", "window", "unknown"])
def test_config_is_validated(override: dict[str, Any]) -> None:
    if "alerts" in override and "GPUHostBound" in override["alerts"]:
        # replace the thresholds mapping entirely: merge would keep the missing key
        cfg = yaml.safe_load((ROOT / "mixin" / "config.yaml").read_text())
        cfg["alerts"]["GPUHostBound"]["thresholds"] = {"max_utilization": 0.5}
        from mixin.config import Config
        with pytest.raises(ValidationError):
            Config.model_validate(cfg)
        return
    with pytest.raises(ValidationError):
        load(override)


def test_shard_files_split_the_groups_and_add_the_shard_matcher(tmp_path: Path) -> None:
    """`python -m mixin --shards 2`: each shard file holds every goodput.shard.* group reading
    only its shard (every selector, the engines' TTFT buckets too) and keeping the shard label;
    the global file holds the goodput.global.* groups with the plain selector."""
    subprocess.run([sys.executable, "-m", "mixin", "--shards", "2", "--out", str(tmp_path)],
                   check=True, cwd=Path(__file__).resolve().parents[1])
    single = {g["name"] for f in ("goodput.rules.yml", "goodput_alerts.rules.yml")
              for g in yaml.safe_load((Path(__file__).resolve().parents[1] / "alerts" / f)
                                      .read_text())["groups"]}
    for i in range(2):
        text = (tmp_path / "vmalert" / f"shard-{i}.rules.yml").read_text()
        groups = yaml.safe_load(text)["groups"]
        assert {g["name"] for g in groups} == {n for n in single if n.startswith("goodput.shard.")}
        exprs = [r["expr"] for g in groups for r in g["rules"]]
        # Every series selector of the exporter's job reads the shard's own series only.
        assert all(f'shard="{i}"' in sel for e in exprs
                   for sel in re.findall(r'\{[^{}]*job="gpu-goodput-exporter"[^{}]*\}', e))
        ttft = next(e for e in exprs if "time_to_first_token" in e)
        assert f'shard="{i}"' in ttft and "by (cluster, shard," in ttft
        assert f'shard="{1 - i}"' not in text
    glob = yaml.safe_load((tmp_path / "vmalert" / "global.rules.yml").read_text())["groups"]
    assert {g["name"] for g in glob} == {n for n in single if n.startswith("goodput.global.")}
    assert not re.search(r'shard="\d', (tmp_path / "vmalert" / "global.rules.yml").read_text())
