"""The golden exposition: the simulated node's /metrics at a fixed virtual time.

``tests/test_golden_exposition.py`` compares :func:`render` with the committed file, so any
change to a family's name, labels, help or values shows as a diff in review. A branch that
changes the exposition on purpose regenerates it:

    .venv/bin/python -m tests.support.golden --update

What is left out is what no fixed clock can pin: the process families and the poll-duration
observations (wall time); the build labels and the config load time are pinned here.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry

from exporter import collectors
from exporter.metrics.encode import Encoder
from exporter.metrics.self_metrics import SelfMetrics
from exporter.model.config import ModelConfig
from exporter.model.node import NodeModel
from exporter.process import logdamp
from exporter.sim.fake_nvml import simulated_node
from exporter.sim.fake_proc import simulated_proc
from exporter.snapshot import SnapshotStore
from exporter.sources.jobs.config import JobsConfig
from exporter.sources.jobs.procfs import ProcJobSource
from exporter.sources.nvml import NvmlSource
from exporter.sources.nvml_session import NvmlSession
from exporter.sources.profiling.gpm import GpmSource
from exporter.sources.profiling.modes import BACKENDS
from exporter.sources.xid import XidSource
from exporter.wiring.config import Settings

PATH = Path(__file__).resolve().parents[1] / "golden" / "simulated-node.prom"
START = 1000.0
"""Virtual seconds at the first poll."""
POLLS = 12
"""One-second polls before the scrape: past the model's enter windows and GPM's first."""
NODE = "golden-node"


class _Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def render(openmetrics: bool = False) -> str:
    """The default-settings simulated node's exposition after ``POLLS`` virtual seconds."""
    logdamp.DAMPER.reset()  # process-wide: lines other tests left out must not show here
    clock = _Clock()
    settings = Settings(simulate=True, node_name=NODE)
    session = NvmlSession(simulated_node(clock=clock, gpus=settings.simulate_gpus), "simulated")
    session.open()
    store = SnapshotStore(NODE, profiling_order=BACKENDS)
    registry = CollectorRegistry(auto_describe=False)
    metrics = SelfMetrics(registry, NODE)
    metrics.build_info.labels(NODE, "golden", "simulated", "golden").set(1)
    metrics.reload_time.labels(NODE).set(START)  # wall time at start: pinned
    encoder = Encoder(collectors.families(collectors.enabled(settings), settings), registry)
    proc = simulated_proc()
    jobs = ProcJobSource(
        settings.section(JobsConfig), proc.name, NODE,
        processes=lambda: store.current.processes, keep=proc,
    )
    sources = [
        NvmlSource(session, clock=clock),
        GpmSource(session, clock=clock),
        XidSource(session),
        jobs,
    ]
    model = NodeModel(settings.section(ModelConfig), clock=clock)
    try:
        for s in sources:
            s.open()
        for _ in range(POLLS):
            clock.now += 1.0
            for s in sources:
                store.publish(s.poll_blocking())
            store.publish_verdicts(model.step(store.current, 1.0))
        return encoder.encode(store.current, openmetrics=openmetrics).decode()
    finally:
        sources[2].shutdown()
        session.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.golden", description=__doc__)
    p.add_argument("--update", action="store_true", help="rewrite the committed file")
    args = p.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    body = render()
    if args.update:
        PATH.parent.mkdir(parents=True, exist_ok=True)
        PATH.write_text(body)
        print(f"wrote {PATH} ({len(body.splitlines())} lines)")
        return 0
    old = PATH.read_text() if PATH.exists() else ""
    diff = list(
        difflib.unified_diff(old.splitlines(), body.splitlines(), "committed", "now", lineterm="")
    )
    print("\n".join(diff) or "no difference")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
