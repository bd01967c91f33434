"""The exporter's metrics about itself.

These are kept as ordinary prometheus-client instruments (they describe this process, not
hardware) in the same registry as the snapshot collector.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from exporter.metrics.catalog import define

BUILD_INFO = define(
    "goodput_exporter_build_info",
    "gauge",
    "Constant 1; labels name the exporter version and the GPU backend in use.",
    labels=("version", "backend", "python_version"),
    scope="node",
    source="exporter",
)
POLL_DURATION = define(
    "goodput_exporter_poll_duration_seconds",
    "histogram",
    "Time one poll of a source took.",
    unit="seconds",
    labels=("source",),
    scope="node",
    source="exporter",
)
SOURCE_ERRORS = define(
    "goodput_exporter_source_errors_total",
    "counter",
    "Errors met by a source, by short reason code (a failed poll, a lost GPU, ...).",
    labels=("source", "reason"),
    scope="node",
    source="exporter",
)
LAST_SUCCESS = define(
    "goodput_exporter_last_success_timestamp_seconds",
    "gauge",
    "Unix time of the last successful poll of a source.",
    unit="seconds",
    labels=("source",),
    scope="node",
    source="exporter",
)
SOURCE_UP = define(
    "goodput_exporter_source_up",
    "gauge",
    "1 if the last poll of a source succeeded, else 0 (see the errors counter for why).",
    labels=("source",),
    scope="node",
    source="exporter",
)

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class SelfMetrics:
    """Instruments for the scheduler; one instance per registry."""

    def __init__(self, registry: CollectorRegistry, node: str) -> None:
        self.build_info = Gauge(BUILD_INFO, _doc(BUILD_INFO), BUILD_INFO_LABELS, registry=registry)
        self.poll_duration = Histogram(
            POLL_DURATION,
            _doc(POLL_DURATION),
            ["node", "source"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self.errors = Counter(
            SOURCE_ERRORS.removesuffix("_total"),
            _doc(SOURCE_ERRORS),
            ["node", "source", "reason"],
            registry=registry,
        )
        self.last_success = Gauge(
            LAST_SUCCESS, _doc(LAST_SUCCESS), ["node", "source"], registry=registry
        )
        self.source_up = Gauge(SOURCE_UP, _doc(SOURCE_UP), ["node", "source"], registry=registry)
        self.node = node


BUILD_INFO_LABELS = ["node", "version", "backend", "python_version"]


def _doc(name: str) -> str:
    from exporter.metrics.catalog import CATALOG

    return CATALOG[name].help
