"""Every ``goodput_*`` metric and ``goodput:*`` recording rule named anywhere a user reads
one exists: metric help texts and the code, the docs, the rules, the dashboards, the chart.

A name that does not exist costs a user an empty query (issue 25: a help text named
``goodput_gpu_serving_tokens_total``). The truth is the code's family registry (plus the
exporter's own families) and the recording rules the mixin generates. CHANGELOG.md is left
out: it names what was removed or renamed.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.conftest import REPO
from tests.test_metric_names_in_use import declared

# A metric or rule name; not a file name (goodput_alerts.rules.yml) nor a wildcard in prose
# (goodput_gpu_*_ratio).
NAME = re.compile(r"\bgoodput(?:_[a-z0-9_]+|:[a-z0-9_:]+)\b(?![.*]\w)(?!\*)")


def recording_rules() -> set[str]:
    out = set()
    for path in REPO.glob("alerts/*.rules.yml"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            out |= {rule["record"] for rule in group["rules"] if "record" in rule}
    return out


def known_names() -> set[str]:
    return set(declared()) | recording_rules()


def files() -> list[Path]:
    globs = ("README.md", "docs/**/*.md", "alerts/*.yml", "alerts/tests/*.yml",
             "dashboards/*.json", "exporter/**/*.py", "exporter/runbooks/*.md",
             "mixin/**/*.py", "mixin/*.yaml",
             "helm/**/*.yaml", "helm/**/*.tpl", "helm/**/*.txt", "deploy/**/*")
    found = {p for pattern in globs for p in REPO.glob(pattern) if p.is_file()}
    return sorted(found)


def unknown_names(text: str, known: set[str]) -> dict[str, int]:
    """Unknown name -> first line it is on."""
    out: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        for name in NAME.findall(line):
            if name not in known and not name.endswith("_"):
                out.setdefault(name, lineno)
    return out


def test_every_named_metric_or_rule_exists() -> None:
    known = known_names()
    assert "goodput_gpu_tokens_total" in known and "goodput:gpu_hour_price_dollars" in known
    problems = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path in files()
        for name, line in unknown_names(path.read_text(errors="replace"), known).items()
    ]
    assert not problems, (
        "names no metric family (exporter/collectors.py registry) nor recording rule "
        "(alerts/*.rules.yml) has:\n" + "\n".join(problems))


def test_the_check_finds_a_misnamed_metric() -> None:
    text = "rate(goodput_gpu_energy_joules_total) / rate(goodput_gpu_serving_tokens_total)"
    assert unknown_names(text, known_names()) == {"goodput_gpu_serving_tokens_total": 1}


def test_help_of_joules_per_token_names_the_token_counter() -> None:
    help_text = next(line for line in (REPO / "docs/metrics.md").read_text().splitlines()
                     if line.startswith("| `goodput_gpu_joules_per_token`"))
    assert "goodput_gpu_tokens_total" in help_text
