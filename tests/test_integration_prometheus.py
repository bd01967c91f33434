"""A real Prometheus scrapes the simulated daemon; the answers come from its query API."""

from __future__ import annotations

import urllib.request

import pytest

from exporter.sim.patterns import NODE
from tests.support.daemon import daemon
from tests.support.prometheus import prometheus

pytestmark = pytest.mark.integration


def one(result: list[dict]) -> float:
    assert len(result) == 1, result
    return float(result[0]["value"][1])


def test_prometheus_scrapes_the_simulated_node(tmp_path):
    with daemon("--simulate", "--node-name", "sim-node", log=tmp_path / "daemon.log") as url:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as resp:
            assert resp.status == 200
        target = url.removeprefix("http://")
        with prometheus(tmp_path / "prom", [target]) as prom:
            prom.wait_for('count_over_time(goodput_gpu_energy_joules_total{gpu="2"}[6s]) >= 6')
            assert one(prom.query('up{job="goodput"}')) == 1
            build = prom.query("goodput_exporter_build_info")
            assert build[0]["metric"]["backend"] == "simulated"
            assert len(prom.query("goodput_gpu_up == 1")) == len(NODE)  # every simulated GPU
            # the utilization lie, as Prometheus sees it
            assert one(prom.query('goodput_gpu_utilization_ratio{gpu="5"}')) > 0.9
            assert one(prom.query('goodput_gpu_sm_active_ratio{gpu="5"}')) < 0.1
            # energy is re-read every 5th poll: joules between the first and last change
            # seen, over the time between them, is the mean power
            prom.wait_for('changes(goodput_gpu_energy_joules_total{gpu="2"}[30s]) >= 3', 40)
            raw = prom.query('goodput_gpu_energy_joules_total{gpu="2"}[30s]')[0]["values"]
            steps = [(float(t), float(v)) for (t, v), (_, p) in zip(raw[1:], raw, strict=False)
                     if v != p]
            (t0, e0), (t1, e1) = steps[0], steps[-1]
            power = one(prom.query('goodput_gpu_power_watts{gpu="2"}'))
            assert (e1 - e0) / (t1 - t0) == pytest.approx(power, rel=0.15)
            # counters next to gauges: rate() of the integrated counter is the mean ratio. The
            # window must lie inside the counter's life: the profiling counter starts a poll or
            # two after the NVML ones, and a series that starts inside the window is only
            # partly extrapolated (a 5 s window right after start read 0.74 in CI). The window
            # is 30 polls long: the counter steps once a poll and Prometheus scrapes it once a
            # second too, so a window can hold one step more or less than its seconds (a 10 s
            # window read 1.09 once on a fresh clone's first run: 10 steps in 9 s of samples).
            prom.wait_for(
                'count_over_time(goodput_gpu_sm_active_seconds_total{gpu="2"}[32s]) >= 31', 70)
            mean = one(prom.query('rate(goodput_gpu_sm_active_seconds_total{gpu="2"}[30s])'))
            assert mean == pytest.approx(0.97, abs=0.05)
            labels = prom.query('goodput_gpu_info{gpu="0"}')[0]["metric"]
            assert labels["node"] == "sim-node" and labels["uuid"].startswith("GPU-")
