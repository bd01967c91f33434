"""The alerts (alerts/goodput_alerts.rules.yml), one short builder per alert in efficiency,
exporter and hardware; groups named by where they run once Prometheus is sharded."""

from __future__ import annotations

from typing import Any

from mixin.alerts.common import HEADER, AlertBuilder, AlertCtx
from mixin.alerts.efficiency import GLOBAL_EFFICIENCY, SHARD_EFFICIENCY
from mixin.alerts.exporter import EXPORTER
from mixin.alerts.hardware import HARDWARE
from mixin.config import Config
from mixin.rules import GLOBAL, SHARD

GROUPS: list[tuple[str, list[AlertBuilder]]] = [
    (f"{SHARD}.efficiency", SHARD_EFFICIENCY),
    (f"{SHARD}.exporter", EXPORTER),
    (f"{SHARD}.hardware", HARDWARE),
    (f"{GLOBAL}.efficiency", GLOBAL_EFFICIENCY),
]


def alert_rules(cfg: Config) -> dict[str, Any]:
    c = AlertCtx(cfg)
    return {"groups": [{"name": name, "rules": [build(c) for build in builders]}
                       for name, builders in GROUPS]}


__all__ = ["HEADER", "alert_rules"]
