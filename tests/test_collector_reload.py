"""A reload asks each collector what it takes live (``Collector.live``) and hands it its
section (``Collector.reconfigure``): nothing in the daemon or the reload names a collector."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from exporter import collectors
from exporter.collectors.base import Context
from exporter.model.config import ModelConfig
from exporter.sim.fake_nvml import simulated_node
from exporter.sources.base import Source
from exporter.sources.nvml_session import NvmlSession
from exporter.wiring.config import Settings
from exporter.wiring.daemon import build
from exporter.wiring.reload import needs_restart


def test_any_collector_that_declares_live_keys_gets_its_section(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handed: list[int] = []

    def reconfigure(running: Sequence[Source], ctx: Context) -> list[Source]:
        handed.append(ctx.settings.section(ModelConfig).enter_windows)
        return []

    model = next(c for c in collectors.REGISTRY if c.section == "model")
    live_model = dataclasses.replace(
        model, live=frozenset({"enter_windows"}), reconfigure=reconfigure
    )
    monkeypatch.setattr(
        collectors, "REGISTRY", tuple(live_model if c is model else c for c in collectors.REGISTRY)
    )
    old = Settings(simulate=True, simulate_gpus=1)
    daemon = build(old, NvmlSession(simulated_node(gpus=1), "simulated"))
    new = Settings(simulate=True, simulate_gpus=1, model={"enter_windows": 5})
    assert needs_restart(old, new) == []
    daemon.apply(new)
    assert handed == [5] and daemon.settings.section(ModelConfig).enter_windows == 5
    both = Settings(simulate=True, simulate_gpus=1, model={"enter_windows": 5, "leave_windows": 4})
    assert needs_restart(old, both) == ["model.leave_windows"]


def test_a_collector_without_live_keys_needs_a_restart_for_any_change() -> None:
    old = Settings(simulate=True)
    new = Settings(simulate=True, model={"enter_windows": 5}, kubernetes={"interval": 3})
    assert sorted(needs_restart(old, new)) == ["kubernetes", "model"]
    assert needs_restart(old, Settings(simulate=True, serving={"timeout": 3})) == []
    assert needs_restart(old, Settings(simulate=True, serving={"discover_pods": True})) == [
        "serving.discover_pods"
    ]
