"""The mixin's configuration: mixin/config.yaml, optionally deep-merged with overrides."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from exporter.model import straggler

DEFAULT = Path(__file__).resolve().parent / "config.yaml"
DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(duration: str) -> float:
    match = DURATION.match(duration)
    if not match:
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    return int(match[1]) * SECONDS[match[2]]


def _duration(value: str) -> str:
    seconds(value)
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Labels(Strict):
    cluster: str = "cluster"
    node: str = "node"
    gpu: str = "gpu"
    namespace: str = "namespace"
    pod: str = "pod"
    container: str = "container"
    job_name: str = "job_name"
    job_source: str = "job_source"
    job_id: str = "job_id"

    @model_validator(mode="after")
    def _names(self) -> Labels:
        for name, value in self.model_dump().items():
            if not LABEL.match(value):
                raise ValueError(f"labels.{name}: {value!r} is not a label name")
        return self


class Grafana(Strict):
    datasource_type: str = "prometheus"
    datasource_uid: str = "${datasource}"
    datasource_name: str = ""
    tags: list[str] = Field(default_factory=lambda: ["goodput"], min_length=1)


class Windows(Strict):
    rate: str = "5m"
    xid: str = "10m"
    ecc: str = "10m"
    source_errors: str = "15m"

    _check = field_validator("*")(classmethod(lambda cls, v: _duration(v)))


class Alert(Strict):
    for_: str = Field(alias="for")
    severity: Literal["critical", "warning", "info"]
    thresholds: dict[str, float] = Field(default_factory=dict)

    _check = field_validator("for_")(classmethod(lambda cls, v: _duration(v)))


# The thresholds every alert's expression reads; the configuration must give each.
THRESHOLDS: dict[str, set[str]] = {
    "GPUBusyButUnproductive": {"min_utilization", "max_sm_share"},
    "GPUHolderBusyButUnproductive": set(),
    "GPUBusyNoOutput": {"min_utilization", "max_tokens_per_second"},
    "GPUAllocatedIdle": {"max_utilization"},
    "GPUHostBound": {"min_waiting_requests", "max_utilization"},
    "GPULowGoodputVsFleet": {"max_share_of_median", "min_fleet_gpus"},
    "GPUJobStraggler": {"min_waiting_gap"},
    "GPUJobLosingToWaiting": {"min_waiting_share"},
    "GPUProfilingUnavailable": set(),
    "GPUProfilingStale": set(),
    "GoodputExporterDown": set(),
    "GoodputExporterStale": {"max_age_seconds"},
    "GoodputExporterSourceErrors": {"min_errors"},
    "ServingTargetDown": set(),
    "GPUXidCritical": set(),
    "GPUThermalThrottling": {"max_throttled_ratio"},
    "GPUPowerBrake": {"max_brake_ratio"},
    "GPUEccUncorrectable": set(),
    "GPURowRemapFailure": set(),
    "GPURowRemapPending": set(),
    "GPULost": set(),
}


class Config(Strict):
    selector: str = Field(min_length=1)
    labels: Labels = Labels()
    runbook_base_url: str
    gpu_hour_price_dollars: float = Field(gt=0)
    grafana: Grafana = Grafana()
    windows: Windows = Windows()
    rule_interval: str | None = "1m"
    alerts: dict[str, Alert]

    @field_validator("selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        if "{" in value or "}" in value:
            raise ValueError("selector is the inside of {...}: e.g. job=\"gpu-goodput-exporter\"")
        return value

    @field_validator("rule_interval")
    @classmethod
    def _interval(cls, value: str | None) -> str | None:
        return None if value is None else _duration(value)

    @model_validator(mode="after")
    def _alerts(self) -> Config:
        if set(self.alerts) != set(THRESHOLDS):
            raise ValueError(f"alerts: expected exactly {sorted(THRESHOLDS)}, "
                             f"got {sorted(self.alerts)}")
        for name, alert in self.alerts.items():
            if set(alert.thresholds) != THRESHOLDS[name]:
                raise ValueError(f"alerts.{name}.thresholds: expected {sorted(THRESHOLDS[name])}")
        return self

    def runbook(self, alert: str) -> str:
        return f"{self.runbook_base_url}{alert}.md"


def merge(base: Any, override: Any) -> Any:
    """``override`` deep-merged over ``base`` (mappings merge, everything else replaces)."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base.get(key), value) if key in base else value
        return out
    return override


def declared() -> dict[str, Any]:
    """The thresholds the exporter declares, which the rules must share with it: the
    straggler gap is the model's ``model.straggler_gap`` (exporter/model/straggler.py), so the
    node's model and the cross-node rule name the same GPU at the same gap. An override
    may still set it (where the daemons run with another ``model.straggler_gap``)."""
    return {"alerts": {"GPUJobStraggler": {"thresholds": {"min_waiting_gap": straggler.GAP}}}}


def load(*overrides: Path | dict[str, Any]) -> Config:
    """The default configuration, the exporter's declared thresholds (:func:`declared`) and
    each override (a YAML file or a mapping) merged in, in that order."""
    data = merge(yaml.safe_load(DEFAULT.read_text()), declared())
    for override in overrides:
        extra = yaml.safe_load(override.read_text()) if isinstance(override, Path) else override
        data = merge(data, extra or {})
    return Config.model_validate(data)
