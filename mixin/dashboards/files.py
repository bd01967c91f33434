"""dashboards/*.json as text, for one configuration."""

from __future__ import annotations

from collections.abc import Callable

from grafana_foundation_sdk.builders.dashboard import Dashboard

from mixin.config import Config
from mixin.dashboards import fleet, node, serving
from mixin.dashboards.common import Ctx, to_json

BOARDS: dict[str, Callable[[Ctx], Dashboard]] = {
    "dashboards/goodput-fleet.json": fleet.build,
    "dashboards/goodput-node.json": node.build,
    "dashboards/goodput-serving.json": serving.build,
}


def dashboard_files(cfg: Config) -> dict[str, str]:
    ctx = Ctx(cfg)
    return {name: to_json(build(ctx)) for name, build in BOARDS.items()}
