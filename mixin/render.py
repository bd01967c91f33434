"""Every generated file of the mixin, as text, for one configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mixin.alerts import HEADER as ALERTS_HEADER
from mixin.alerts import alert_rules
from mixin.config import Config
from mixin.rules import HEADER as RULES_HEADER
from mixin.rules import recording_rules

ROOT = Path(__file__).resolve().parent.parent


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)


def to_yaml(header: str, doc: dict[str, Any]) -> str:
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True,
                     indent=2)
    return header + body


def rule_files(cfg: Config) -> dict[str, str]:
    """alerts/<name> -> text."""
    return {
        "alerts/goodput.rules.yml": to_yaml(RULES_HEADER, recording_rules(cfg)),
        "alerts/goodput_alerts.rules.yml": to_yaml(ALERTS_HEADER, alert_rules(cfg)),
    }


def render(cfg: Config) -> dict[str, str]:
    """Repository-relative path -> text of every generated file."""
    from mixin.dashboards import dashboard_files

    return {**rule_files(cfg), **dashboard_files(cfg)}
