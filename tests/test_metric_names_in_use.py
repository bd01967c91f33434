"""Alerts, recording rules and dashboards use only metric families the exporter declares,
and every family they use is in the default set (a dashboard must not go blank unless the
user asked for --extended-metrics)."""

from __future__ import annotations

import re

from exporter import collectors
from exporter.metrics.self_metrics import SELF_FAMILIES
from exporter.wiring.config import Settings
from tests.conftest import REPO

NAME = re.compile(r"\bgoodput_[a-z0-9_]+")
# Panels that say in their title that they need --extended-metrics, or show an optional
# family as a second line next to a default one.
OPTIONAL_OK = {
    "goodput_gpu_clock_hertz",
    "goodput_gpu_clock_max_hertz",
    "goodput_gpu_power_limit_watts",
}


def declared() -> dict[str, bool]:
    """Family name -> in the default set."""
    settings = Settings(simulate=True)
    out = {
        fam.name: fam.default
        for group in collectors.families(collectors.REGISTRY, settings)
        for fam in group.families
    }
    for fam in SELF_FAMILIES:
        out[fam.name] = True
        if fam.type == "histogram":
            out |= dict.fromkeys((f"{fam.name}_bucket", f"{fam.name}_sum", f"{fam.name}_count"),
                                 True)
    return out


def test_rules_and_dashboards_reference_existing_families():
    files = [*REPO.glob("alerts/*.rules.yml"), *REPO.glob("dashboards/*.json")]
    assert len(files) >= 5
    known = declared()
    for path in files:
        used = set(NAME.findall(path.read_text()))
        unknown = sorted(used - set(known))
        assert not unknown, f"{path.relative_to(REPO)} uses unknown metrics: {unknown}"
        optional = sorted(n for n in used if not known[n] and n not in OPTIONAL_OK)
        assert not optional, f"{path.relative_to(REPO)} needs --extended-metrics: {optional}"
