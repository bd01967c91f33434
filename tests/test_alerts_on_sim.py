"""The alert expressions pick out exactly the simulated node's problem GPUs.

The thresholds were chosen against real counter shapes; the simulated node reproduces them
(gpu 1 allocated idle, 4 host bound, 5 hollow busy, 6 thermally throttled, 7 lost), so each
expression must select its GPU and no healthy one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.backfill import backfilled_prometheus
from tests.support.prometheus import PrometheusServer

ALERTS = Path(__file__).resolve().parent.parent / "alerts" / "goodput_alerts.rules.yml"
EXPECTED = {
    "GPUBusyButUnproductive": {"5"},
    "GPUAllocatedIdle": {"1"},
    "GPUHostBound": {"4"},
    "GPUThermalThrottling": {"6"},
    "GPULost": {"7"},
    "GPUBusyNoOutput": set(),
    "GPUPowerBrake": set(),
    "GPUEccUncorrectable": set(),
    "GPUProfilingUnavailable": {"7"},  # a lost GPU has no counters; GPULost inhibits it
}

pytestmark = pytest.mark.integration


def expressions() -> dict[str, str]:
    return {r["alert"]: r["expr"] for g in yaml.safe_load(ALERTS.read_text())["groups"]
            for r in g["rules"]}


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    with backfilled_prometheus(tmp_path_factory.mktemp("sim"), float(int(time.time()))) as p:
        yield p


@pytest.mark.parametrize("alert", sorted(EXPECTED))
def test_alert_selects_the_simulated_gpu(prom: PrometheusServer, alert: str) -> None:
    gpus = {s["metric"].get("gpu") for s in prom.query(expressions()[alert])}
    assert gpus == EXPECTED[alert]
