"""Shared fixtures: a manual clock and simulated nodes built on the pynvml drop-in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from exporter.sim.fake_nvml import FakeGpu, FakeNvml, simulated_node
from exporter.sim.patterns import NODE
from exporter.sim.physics import GpuPhysics
from tests.support.heartbeat import Heartbeat

REPO = Path(__file__).resolve().parents[1]
_heartbeat: Heartbeat | None = None


def pytest_configure(config: pytest.Config) -> None:
    """A line every 20 s while one test runs long (tests/support/heartbeat.py); nothing
    under ``--collect-only``."""
    global _heartbeat
    if config.option.collectonly:
        return
    _heartbeat = Heartbeat.on_terminal()


def pytest_collection_finish(session: pytest.Session) -> None:
    if _heartbeat is not None:
        _heartbeat.total = len(session.items)


def pytest_runtest_logstart(nodeid: str) -> None:
    if _heartbeat is not None:
        _heartbeat.started(nodeid)


def pytest_runtest_logfinish(nodeid: str) -> None:
    if _heartbeat is not None:
        _heartbeat.finished()


def pytest_unconfigure(config: pytest.Config) -> None:
    global _heartbeat
    if _heartbeat is not None:
        _heartbeat.close()
        _heartbeat = None

# Property tests are reproducible in `make test` and CI: the same examples every run and no
# example database to replay one checkout's old failure into every later run. `make fuzz`
# (HYPOTHESIS_PROFILE=fuzz) explores: fresh random examples on every run, several runs.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("fuzz", derandomize=False, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


class ManualClock:
    """A clock tests move by hand, so simulated time is exact and no test sleeps."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sim(clock: ManualClock) -> FakeNvml:
    """The first 8 GPUs of the simulated node on a manual clock."""
    return simulated_node(clock=clock, gpus=8)


def make_node(clock: ManualClock, workloads: list[str]) -> FakeNvml:
    """A node whose GPU i runs the named workload of the simulated node."""
    by_name = {w.name: w for w in NODE}
    gpus = []
    for index, name in enumerate(workloads):
        w = by_name[name]
        gpus.append(
            FakeGpu(
                index=index,
                physics=GpuPhysics(w.pattern, start=clock()),
                processes=list(w.processes),
                lost_after=w.lost_after,
            )
        )
    return FakeNvml(gpus, clock=clock)


@pytest.fixture(autouse=True)
def _reset_structlog():
    """Tests that run the CLI configure structlog against a captured stream; undo it, and
    start every test with an empty log damper (it is process-wide)."""
    from exporter.process.logdamp import DAMPER

    DAMPER.reset()
    _quiet_structlog()
    yield
    _quiet_structlog()
    _unbridge()


def _quiet_structlog() -> None:
    """structlog's defaults print every event, debug included, to whatever ``sys.stdout``
    is when it is logged: from a thread a finished test left behind (a source thread of an
    in-process daemon, an XID watch starting late) that is the terminal, and the line lands
    among pytest's dots. Tests read logs through ``capture_logs`` or run the CLI, which
    configures its own output; unconfigured events go nowhere."""
    import structlog

    structlog.reset_defaults()
    structlog.configure(logger_factory=structlog.ReturnLoggerFactory())


def _unbridge() -> None:
    """Give aiohttp's and asyncio's loggers back their default handling after a test that
    ran ``exporter.process.logging.configure`` (it bridges them into structlog)."""
    import logging

    from exporter.process.logging import BRIDGED, Bridge

    for name in BRIDGED:
        logger = logging.getLogger(name)
        bridged = [h for h in logger.handlers if isinstance(h, Bridge)]
        for handler in bridged:
            logger.removeHandler(handler)
        if bridged:
            logger.propagate = True
            logger.setLevel(logging.NOTSET)
