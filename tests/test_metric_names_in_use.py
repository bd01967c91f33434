"""Alerts, recording rules and dashboards use only metric families the exporter publishes."""

from __future__ import annotations

import re

from exporter.metrics.catalog import load_all

from tests.conftest import REPO

NAME = re.compile(r"\bgoodput_[a-z0-9_]+")
# Families the rules already read and the exporter is about to publish (its rewrite moves
# pod labels off the per-GPU series onto this info series). Remove once the catalog has it.
ANNOUNCED = {"goodput_gpu_pod_info"}


def published() -> set[str]:
    names = set()
    for name, spec in load_all().items():
        names.add(name)
        if spec.type == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def test_rules_and_dashboards_reference_existing_families():
    files = [*REPO.glob("alerts/*.rules.yml"), *REPO.glob("dashboards/*.json")]
    assert len(files) >= 5
    known = published() | ANNOUNCED
    for path in files:
        unknown = sorted(set(NAME.findall(path.read_text())) - known)
        assert not unknown, f"{path.relative_to(REPO)} uses unknown metrics: {unknown}"
