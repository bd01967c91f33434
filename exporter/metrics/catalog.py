"""The catalog of metric families.

Each source module declares the families it publishes with :func:`define` at import time,
next to the code that fills them (node_exporter keeps descriptors beside their collector).
The renderer only emits families found here, and ``docs/metrics.md`` is generated from it,
so documentation cannot drift from what ``/metrics`` serves.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "histogram"]
Scope = Literal["device", "node"]

DEVICE_BASE_LABELS: tuple[str, ...] = ("gpu", "uuid", "node")
"""Labels every per-device series carries (attribution labels are appended after them)."""


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: MetricType
    help: str
    unit: str = ""
    labels: tuple[str, ...] = ()
    scope: Scope = "device"
    source: str = ""


CATALOG: dict[str, MetricSpec] = {}

# Modules that declare families. Importing them fills CATALOG; keep this list in sync when a
# new collector is added (tests/test_metrics_doc.py fails if a published family is missing).
DECLARING_MODULES: tuple[str, ...] = (
    "exporter.metrics.self_metrics",
    "exporter.sources.nvml",
    "exporter.sources.profiling_metrics",
    "exporter.sources.gpm",
    "exporter.sources.xid",
    "exporter.sources.kubernetes.status",
    "exporter.sources.kubernetes.processes",
    "exporter.model.source",
    "exporter.sources.serving.metrics",
)


def define(
    name: str,
    type: MetricType,
    help: str,
    *,
    unit: str = "",
    labels: tuple[str, ...] = (),
    scope: Scope = "device",
    source: str = "",
) -> str:
    """Declare a family and return its name, so callers write ``X = define(...)``."""
    spec = MetricSpec(name, type, help, unit, labels, scope, source)
    existing = CATALOG.get(name)
    if existing is not None and existing != spec:
        raise ValueError(f"metric {name} declared twice with different definitions")
    if not name.startswith("goodput_"):
        raise ValueError(f"metric {name} must start with goodput_")
    if type == "counter" and not name.endswith("_total"):
        raise ValueError(f"counter {name} must end in _total")
    CATALOG[name] = spec
    return name


def load_all() -> dict[str, MetricSpec]:
    """Import every declaring module and return the full catalog."""
    for module in DECLARING_MODULES:
        importlib.import_module(module)
    return dict(sorted(CATALOG.items()))
