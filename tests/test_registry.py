"""The registry is the only list of collectors: every family and every reading type has
exactly one owner, and a new source is one module plus one registry line."""

from __future__ import annotations

import sys
from collections import Counter

import pytest
from aiohttp.test_utils import TestClient, TestServer

from exporter import collectors
from exporter.readings import JobAssignments
from exporter.settings import names
from exporter.sim.fake_nvml import simulated_node
from exporter.sources.nvml_session import NvmlSession
from exporter.wiring.config import Settings
from exporter.wiring.daemon import build
from tests.support import toy_collector

EVERYTHING_ON = Settings(
    simulate=True,
    kubernetes={"enabled": True, "pod_labels": True},
    serving={"targets": ["http://127.0.0.1:9/metrics"]},
)


def test_every_family_belongs_to_exactly_one_registered_collector() -> None:
    owners: dict[str, list[str]] = {}
    for c in collectors.REGISTRY:
        for group in c.families(EVERYTHING_ON):
            assert group.collector == c.name, (c.name, group.collector)
            for family in group.families:
                owners.setdefault(family.name, []).append(c.name)
    shared = {name: who for name, who in owners.items() if len(who) != 1}
    assert not shared, f"families with more than one owner: {shared}"
    assert len(owners) > 50  # the check saw the real catalog


def test_every_reading_type_has_one_owner_or_says_it_is_shared() -> None:
    counts = Counter(kind for c in collectors.REGISTRY for kind in c.readings)
    assert counts and all(n == 1 for n in counts.values()), counts
    shared = {kind for c in collectors.REGISTRY for kind in c.shares}
    assert shared and not shared & set(counts), "a shared type has no single owner"


def test_several_collectors_may_share_a_reading_type() -> None:
    """Issue 41: the test-only lease source publishes ``JobAssignments`` as the built-in
    job collector does, and both say so."""
    from tests.support import lease_jobs

    built_in = [c.name for c in collectors.REGISTRY if JobAssignments in c.shares]
    registry = (*collectors.REGISTRY, lease_jobs.COLLECTOR)
    sharing = [c.name for c in registry if JobAssignments in c.shares]
    assert built_in and sharing == [*built_in, "lease"]
    assert not [c.name for c in registry if JobAssignments in c.readings]


def test_collector_names_are_unique_and_sections_exist() -> None:
    assert len(set(collectors.NAMES)) == len(collectors.NAMES)
    for c in collectors.REGISTRY:
        if c.section:
            assert Settings.model_fields[c.section].annotation is c.config, c


async def test_a_toy_source_is_one_module_and_one_registry_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the new module (it would be exporter/collectors/toy.py) ...
    monkeypatch.setitem(sys.modules, "exporter.collectors.toy", toy_collector)
    # ... and the one registry line (one more name in exporter/settings/names.py)
    monkeypatch.setattr(names, "COLLECTOR_NAMES", (*names.COLLECTOR_NAMES, "toy"))
    monkeypatch.setattr(collectors, "REGISTRY", collectors.load(names.COLLECTOR_NAMES))
    assert Settings(collectors={"toy": False}).collectors == {"toy": False}  # switchable
    settings = Settings(simulate=True, simulate_gpus=1)
    daemon = build(settings, NvmlSession(simulated_node(gpus=1), "simulated"))
    daemon.shared.get(NvmlSession).open()
    (toy,) = [s for s in daemon.sources if s.name == "toy"]
    await daemon.scheduler.poll_once(toy)
    assert daemon.store.current.get(toy_collector.ToyReading) == toy_collector.ToyReading(42.0)
    client = TestClient(TestServer(daemon.app()))
    await client.start_server()
    try:
        body = await (await client.get("/metrics")).text()
    finally:
        await client.close()
    assert 'goodput_toy_answer{node="' in body and body.count("goodput_toy_answer{") == 1
    text = "\n".join(line for line in body.splitlines() if line.startswith("goodput_toy"))
    assert text.endswith(" 42")
