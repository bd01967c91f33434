"""MIG end to end on the simulated NVML: each instance carries the profile NVML names it
after, and the model measures its MFU against that slice's share of the GPU's peak."""

from __future__ import annotations

import pytest

from exporter.metrics.gpu import IDENTITY
from exporter.model.config import ModelConfig
from exporter.model.flops import peak_flops
from exporter.model.node import NodeModel
from exporter.readings import NodeVerdicts, ServingState
from exporter.sim.fake_nvml import FakeMig
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.nvml import NvmlSource
from exporter.sources.nvml_session import NvmlSession
from tests.conftest import ManualClock, make_node
from tests.support.typed import served

H100 = "NVIDIA H100 80GB HBM3"
SLICES = {"0-1": "1g.10gb", "0-2": "3g.40gb"}
ENGINE_FLOPS = 20e12
"""FLOP/s the engine reports on each instance: the same work on both slices."""


def mig_node(clock: ManualClock):  # type: ignore[no-untyped-def]
    nvml = make_node(clock, ["compute_gemm"])
    nvml.gpus[0].mig = [
        FakeMig(1, 0, "MIG-aaaa", 10 * 1024**3, 4 * 1024**3, profile="1g.10gb"),
        FakeMig(2, 0, "MIG-bbbb", 40 * 1024**3, 30 * 1024**3, profile="3g.40gb"),
    ]
    return nvml


def identity(result: SourceResult, gpu: str) -> dict[str, str]:
    device = {d.gpu: d for d in result.reading.inventory or ()}[gpu]
    ((values, _),) = IDENTITY.families[0].rows(device)
    return dict(zip(IDENTITY.families[0].labels, values, strict=True))


def test_instances_carry_the_profile_from_their_nvml_name(clock: ManualClock) -> None:
    session = NvmlSession(mig_node(clock), "simulated")
    source = NvmlSource(session, clock=clock)
    source.open()
    try:
        result = source.poll_blocking()
    finally:
        source.shutdown()
    gpus = {d.gpu: d for d in result.reading.inventory or ()}
    assert set(gpus) == {"0", *SLICES}
    assert gpus["0"].mig_profile == "" and not gpus["0"].is_mig
    for gpu, profile in SLICES.items():
        assert gpus[gpu].mig_profile == profile
        assert gpus[gpu].name == f"{H100} MIG {profile}"
        info = identity(result, gpu)
        assert info["mig_profile"] == profile and info["mig_parent_uuid"] == gpus["0"].uuid


def run(clock: ManualClock, steps: int) -> NodeVerdicts:
    """NVML and GPM read the simulated MIG node; the serving engine reports the same FLOP/s
    on both instances; the model steps once a second on the same clock."""
    from exporter.sources.profiling.gpm import GpmSource

    session = NvmlSession(mig_node(clock), "simulated")
    session.open()
    sources = [NvmlSource(session, clock=clock), GpmSource(session, min_window=0.0, clock=clock)]
    store = SnapshotStore("node-a", profiling_order=("gpm",))
    model = NodeModel(ModelConfig(), clock=clock)
    verdicts = NodeVerdicts()
    try:
        for i in range(1, steps + 1):
            clock.advance(1.0)
            for source in sources:
                store.publish(source.poll_blocking())
            models = {gpu: (served(1000.0 * i, flops=ENGINE_FLOPS * i),) for gpu in SLICES}
            store.publish(
                SourceResult(source="serving", timestamp=clock(), reading=ServingState(gpus=models))
            )
            verdicts = model.step(store.current, 1.0)
            store.publish_verdicts(verdicts)
    finally:
        session.close()
    return verdicts


def test_each_slice_gets_its_share_of_the_peak(clock: ManualClock) -> None:
    pytest.importorskip("exporter.sources.profiling.gpm")
    verdicts = run(clock, steps=5)
    full = peak_flops(H100, "bf16")
    assert full is not None
    small, large = verdicts.gpus["0-1"].mfu, verdicts.gpus["0-2"].mfu
    assert small == pytest.approx(ENGINE_FLOPS / (full / 7))
    assert large == pytest.approx(ENGINE_FLOPS / (full * 3 / 7))
    # The whole GPU serves nothing itself: no MFU, and never the slice's figure.
    assert verdicts.gpus["0"].mfu is None
