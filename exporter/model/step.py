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


class ModelStep:
    """Runs the node model after GPU polls, at most once per model interval, and publishes
    its verdicts into the next snapshot."""

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
        # nvml and a profiling backend both poll each interval: step once per interval.
        if now - self._last < 0.5 * self.interval:
            return
        self._last = now
        verdicts = self.model.step(self.store.current, self.interval)
        if self.metrics is not None:  # implausible inputs (MFU above 1, non-finite): counted
            for reason, count in verdicts.errors.items():
                self.metrics.errors.labels(self.metrics.node, "model", reason).inc(count)
        self.store.publish_verdicts(verdicts)
