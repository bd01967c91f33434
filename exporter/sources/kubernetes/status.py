"""Whether pod attribution works, as a metric the GPU metrics never depend on."""

from __future__ import annotations

from typing import Any

from exporter.metrics.catalog import define
from exporter.snapshot import Sample, labels

ATTRIBUTION_AVAILABLE = define(
    "goodput_attribution_available",
    "gauge",
    "1 if attribution of GPUs to pods works through `source` (kubelet: pod-resources API; "
    "cgroup: PID to pod through /proc/<pid>/cgroup); 0 with `reason` (socket_missing, "
    "permission_denied, unavailable, timeout, rate_limited, error, proc_missing, "
    "no_host_pid) if not. GPU metrics flow either way.",
    labels=("source", "reason"),
    scope="node",
    source="kubernetes",
)


def availability(source: str, reason: str = "") -> Sample:
    """The status sample of one attribution source; an empty reason means it works."""
    value = 0.0 if reason else 1.0
    return Sample(ATTRIBUTION_AVAILABLE, value, labels(source=source, reason=reason))


class OnChange:
    """Logs an event once each time a state changes, never on every poll."""

    def __init__(self, logger: Any, event: str) -> None:
        self._log = logger
        self._event = event
        self._state: object = None

    def __call__(self, state: object, level: str = "info", **fields: Any) -> None:
        if state != self._state:
            self._state = state
            getattr(self._log, level)(self._event, **fields)
