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
    """Every alert group, evaluated as often as the recording groups (rule_interval): the
    alerts read series recorded that often, so evaluating them at Prometheus's global
    interval (often 15 s) ran each four times on the same input - GPUHostBound's queue average
    and GPUEccUncorrectable's increase were most of the rules' samples (docs/scaling.md)."""
    c = AlertCtx(cfg)
    groups = []
    for name, builders in GROUPS:
        group: dict[str, Any] = {"name": name}
        if cfg.rule_interval:
            group["interval"] = cfg.rule_interval
        group["rules"] = [build(c) for build in builders]
        groups.append(group)
    return {"groups": groups}


__all__ = ["HEADER", "alert_rules"]
