"""The model's step: runs the node model after GPU polls and publishes its verdicts.

It lives with the model (the model collector's ``after_gpu_poll`` builds it), so the
collectors never reach up into the scheduler; the scheduler only calls what it is given.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from exporter.model.config import ModelConfig
from exporter.model.node import NodeModel
from exporter.snapshot import SnapshotStore, SourceResult

if TYPE_CHECKING:
    from exporter.metrics.self_metrics import SelfMetrics
    from exporter.settings.core import CoreSettings


STALE_POLLS = 2.0
"""A GPU source that has not published for this many intervals is no longer waited for (it
is down or slow): the model steps on what the others publish."""


class ModelStep:
    """Runs the node model once per model interval, after every GPU source has polled, and
    publishes its verdicts into the next snapshot.

    NVML and the profiling backend poll on their own schedules, NVML first. Stepping after
    the first of them judged each window with NVML's reading of this second and the
    profiling window of the previous one: issue 46 found the job split's host time was
    exactly 1 - max(utilization[N], graphics[N-1]) on H200, a checkpoint's stall landing as
    copy time one window later. Waiting for the round to complete keeps every reading of a
    window from the same second."""

    def __init__(
        self,
        store: SnapshotStore,
        model: NodeModel,
        interval: float,
        metrics: SelfMetrics | None = None,
        triggers: Iterable[str] | None = None,
    ) -> None:
        self.store = store
        self.model = model
        self.interval = interval
        self.metrics = metrics
        self.triggers = None if triggers is None else frozenset(triggers)
        """Sources whose publish is a GPU poll (their classes say so: ``Source.gpu_poll``); the
        model steps after them only. None: after any publish."""
        self._last = -float("inf")
        start = time.monotonic()
        self._published: dict[str, float] = dict.fromkeys(self.triggers or (), start)
        """Trigger source -> when it last published (each is waited for from the start)."""
        self._round: set[str] = set()
        """Trigger sources that have published since the last step."""

    @classmethod
    def for_settings(
        cls,
        store: SnapshotStore,
        settings: CoreSettings,
        metrics: SelfMetrics | None = None,
        triggers: Iterable[str] | None = None,
    ) -> ModelStep:
        """The model's window is ``model.interval``, else the GPU poll interval."""
        model = settings.section(ModelConfig)
        interval = model.interval or settings.interval
        return cls(store, NodeModel(model), interval, metrics, triggers)

    def __call__(self, result: SourceResult) -> None:
        if self.triggers is not None and result.source not in self.triggers:
            return
        now = time.monotonic()
        self._published[result.source] = now
        self._round.add(result.source)
        # nvml and a profiling backend both poll each interval: step once per interval,
        # once both have (a source silent for STALE_POLLS intervals is not waited for).
        if now - self._last < 0.5 * self.interval:
            return
        live = {s for s, at in self._published.items()
                if now - at <= STALE_POLLS * self.interval}
        if self.triggers is not None and not (live & self.triggers) <= self._round:
            return
        self._last = now
        self._round.clear()
        verdicts = self.model.step(self.store.current, self.interval)
        if self.metrics is not None:  # implausible inputs (MFU above 1, non-finite): counted
            for reason, count in verdicts.errors.items():
                self.metrics.errors.labels(self.metrics.node, "model", reason).inc(count)
        self.store.publish_verdicts(verdicts)
