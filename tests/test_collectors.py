"""The collector registry: every collector can be switched off by flag, environment or file,
and then neither its sources run nor its families are served; --help names each."""

from __future__ import annotations

import subprocess
import sys

import pytest

from exporter import cli, collectors
from exporter.collectors.base import no_sources
from exporter.sim.fake_nvml import simulated_node
from exporter.sources.nvml_session import NvmlSession
from exporter.wiring.config import build
from exporter.wiring.daemon import build as build_daemon
from tests.conftest import REPO
from tests.support.typed import gpus_of

READS = {"serving": {"targets": [{"url": "http://127.0.0.1:9/metrics"}]}}
"""Something for every collector to read (a serving target): a collector switched on with
nothing to read runs no source."""


def settings_tree(name: str, **extra: object) -> dict[str, object]:
    """The simulated node with ``name`` switched on by the registry's own switch
    (``collectors: {name: true}``), whatever its default: no list of the collectors that
    are off by default, so a new one is checked like the others."""
    return {"simulate": True, "simulate_gpus": 2, **READS, "collectors": {name: True}, **extra}


def daemon_for(tree: dict[str, object]):  # type: ignore[no-untyped-def]
    settings = build(tree, environ={})
    session = NvmlSession(simulated_node(gpus=2), "simulated")
    return settings, build_daemon(settings, session)


@pytest.mark.parametrize("name", collectors.NAMES)
def test_no_collector_flag_removes_its_sources_and_families(name: str) -> None:
    args = cli.parser().parse_args([f"--no-collector.{name}"])
    flags = cli.flags_to_tree(args)
    assert flags["collectors"] == {name: False}
    on_settings, on = daemon_for(settings_tree(name))
    off_settings, off = daemon_for(settings_tree(name, collectors={name: False}))
    entry = next(c for c in collectors.REGISTRY if c.name == name)
    assert collectors.is_enabled(entry, on_settings)
    assert not collectors.is_enabled(entry, off_settings)
    on_families = {f.name for g in on.exposition._encoder.groups for f in g.families}
    off_families = {f.name for g in off.exposition._encoder.groups for f in g.families}
    mine = {f.name for group in entry.families(on_settings) for f in group.families}
    assert not (mine & off_families)
    assert mine & on_families or not mine
    on_names = [s.name for s in on.sources]
    off_names = [s.name for s in off.sources]
    gone = set(on_names) - set(off_names)
    assert set(off_names) <= set(on_names)
    if entry.sources is no_sources:  # the model, the GPU series: no source to stop
        assert not gone and mine
        if entry.after_gpu_poll is not None:  # switching the model off drops its step
            assert on.scheduler.after_publish is not None
            assert off.scheduler.after_publish is None
    else:
        assert gone, f"--no-collector.{name} left every source running: {off_names}"
        assert off.scheduler.sources == off.sources


def test_collector_switch_from_environment_and_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = build({}, environ={"GOODPUT_COLLECTORS": "{xid: false}"})
    assert env.collectors == {"xid": False}
    path = tmp_path / "c.yaml"
    path.write_text("collectors:\n  model: false\n")
    assert build({}, environ={}, config_file=str(path)).collectors == {"model": False}


def test_unknown_collector_is_a_config_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate"],
        cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
        env={"GOODPUT_COLLECTORS": "{gpu_magic: true}", "PATH": "/usr/bin:/bin",
             "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 2
    assert "gpu_magic" in proc.stderr


def test_help_names_every_collector() -> None:
    text = cli.parser().format_help()
    for name in collectors.NAMES:
        assert f"--collector.{name}" in text and f"--no-collector.{name}" in text


async def test_profiling_off_says_so_on_every_gpu() -> None:
    """--profiling off keeps the collector: each GPU shows why its profiling panels are
    empty (source="none", reason="off") instead of nothing."""
    from exporter.readings import Device
    from exporter.sources.profiling.build import ProfilingOffSource

    _, daemon = daemon_for(settings_tree("profiling", profiling={"mode": "off"}))
    (off,) = [s for s in daemon.sources if isinstance(s, ProfilingOffSource)]
    off.inventory = lambda: (Device("0", "GPU-0"), Device("1", "GPU-1"))
    result = await off.poll()
    assert {g: (s.backend, s.available, s.reason) for g, s in gpus_of(result).items()} == {
        "0": ("none", False, "off"), "1": ("none", False, "off")}


def test_without_the_nvml_collector_the_daemon_is_ready_not_stuck() -> None:
    """With no source left that lists GPUs, ready at once; another vendor's GPU source,
    where one is registered, is waited for instead."""
    _, daemon = daemon_for(settings_tree("nvml", collectors={"nvml": False}))
    listing = [s.name for s in daemon.sources if s.starts_first]
    assert (daemon.store.current.ready_reason == "") is (not listing), listing
