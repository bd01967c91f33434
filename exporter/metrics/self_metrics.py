"""The exporter's metrics about itself.

These are ordinary prometheus-client instruments (they describe this process, not hardware),
in a small registry the encoder appends after the snapshot's families.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily

from exporter.process.logdamp import DAMPER


@dataclass(frozen=True)
class SelfFamily:
    """Documentation of one self-metric family (docs/metrics.md lists them)."""

    name: str
    type: str
    help: str
    labels: tuple[str, ...]
    unit: str = ""


BUILD_INFO = SelfFamily(
    "goodput_exporter_build_info",
    "gauge",
    "Constant 1; labels name the exporter version and the GPU backend in use.",
    ("node", "version", "backend", "python_version"),
)
POLL_DURATION = SelfFamily(
    "goodput_exporter_poll_duration_seconds",
    "histogram",
    "Time one poll of a source took.",
    ("node", "source"),
    unit="seconds",
)
SOURCE_ERRORS = SelfFamily(
    "goodput_exporter_source_errors_total",
    "counter",
    "Errors met by a source, by short reason code (a failed poll, a lost GPU, ...).",
    ("node", "source", "reason"),
)
LAST_SUCCESS = SelfFamily(
    "goodput_exporter_last_success_timestamp_seconds",
    "gauge",
    "Unix time of the last successful poll of a source.",
    ("node", "source"),
    unit="seconds",
)
SOURCE_UP = SelfFamily(
    "goodput_exporter_source_up",
    "gauge",
    "1 if the last poll of a source succeeded, else 0 (see the errors counter for why).",
    ("node", "source"),
)
RELOAD_OK = SelfFamily(
    "goodput_exporter_config_last_reload_successful",
    "gauge",
    "1 if the last configuration reload (SIGHUP: config file and web config) succeeded, 0 "
    "if it was refused and the previous configuration still runs; 1 at start.",
    ("node",),
)
RELOAD_TIME = SelfFamily(
    "goodput_exporter_config_last_reload_success_timestamp_seconds",
    "gauge",
    "Unix time of the last successful configuration load (start or SIGHUP).",
    ("node",),
    unit="seconds",
)
AUTH_FAILURES = SelfFamily(
    "goodput_exporter_http_auth_failures_total",
    "counter",
    "HTTP requests refused by basic auth, by reason: missing, malformed or wrong_credentials, "
    "or throttled (refused unchecked while a login flood fills the queue). Present when "
    "the web config has basic_auth_users.",
    ("node", "reason"),
)
LOG_SUPPRESSED = SelfFamily(
    "goodput_exporter_log_lines_suppressed_total",
    "counter",
    "Log lines left out by the damper (a repeating event or a flooding client past its "
    "budget, docs/security.md), by event name.",
    ("node", "event"),
)
READS_STUCK = SelfFamily(
    "goodput_exporter_source_reads_stuck",
    "gauge",
    "Reads a source gave up on that are still stuck in the kernel (a process in D state, a "
    "hung file system): each holds a thread and a file descriptor, and what it reads is "
    "not read again until it returns. Present for the job-identity sources, from their "
    "first poll.",
    ("node", "source"),
)
SELF_FAMILIES = (
    BUILD_INFO, POLL_DURATION, SOURCE_ERRORS, LAST_SUCCESS, SOURCE_UP, AUTH_FAILURES, RELOAD_OK,
    RELOAD_TIME, LOG_SUPPRESSED, READS_STUCK,
)

# A decade a bucket: enough to tell a healthy poll (milliseconds) from a slow one (tenths of
# a second) or a hung one (seconds). Thirteen buckets were 10 series per GPU on an 8-GPU
# node, more than the GPU's own efficiency series (docs/scaling.md); _sum/_count give means.
_BUCKETS = (0.001, 0.01, 0.1, 1.0)


class SelfMetrics:
    """Instruments for the scheduler; one instance per registry."""

    def __init__(self, registry: CollectorRegistry, node: str) -> None:
        # Counters' _created series double the series of every counter for a value
        # Prometheus does not use (it has its own reset detection): off, process-wide.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        f = BUILD_INFO
        self.build_info = Gauge(f.name, f.help, f.labels, registry=registry)
        f = POLL_DURATION
        self.poll_duration = Histogram(
            f.name, f.help, f.labels, buckets=_BUCKETS, registry=registry
        )
        f = SOURCE_ERRORS
        self.errors = Counter(f.name.removesuffix("_total"), f.help, f.labels, registry=registry)
        f = LAST_SUCCESS
        self.last_success = Gauge(f.name, f.help, f.labels, registry=registry)
        f = SOURCE_UP
        self.source_up = Gauge(f.name, f.help, f.labels, registry=registry)
        f = AUTH_FAILURES
        self.auth_failures = Counter(
            f.name.removesuffix("_total"), f.help, f.labels, registry=registry
        )
        f = RELOAD_OK
        self.reload_ok = Gauge(f.name, f.help, f.labels, registry=registry)
        f = RELOAD_TIME
        self.reload_time = Gauge(f.name, f.help, f.labels, registry=registry)
        self.node = node
        f = READS_STUCK
        self.reads_stuck = Gauge(f.name, f.help, f.labels, registry=registry)
        registry.register(_Suppressed(node))
        self.reloaded(True)

    def count_auth_failures(self, reasons: tuple[str, ...]) -> Callable[[str], None]:
        """A counter of failed logins, every reason present at 0 from the start."""
        for reason in reasons:
            self.auth_failures.labels(self.node, reason)
        return lambda reason: self.auth_failures.labels(self.node, reason).inc()

    def reloaded(self, ok: bool) -> None:
        """Record a configuration (re)load and whether it took."""
        self.reload_ok.labels(self.node).set(1 if ok else 0)
        if ok:
            self.reload_time.labels(self.node).set_to_current_time()


class _Suppressed:
    """``goodput_exporter_log_lines_suppressed_total`` from the process's damper."""

    def __init__(self, node: str) -> None:
        self._node = node

    def collect(self) -> Iterator[CounterMetricFamily]:
        f = LOG_SUPPRESSED
        family = CounterMetricFamily(f.name.removesuffix("_total"), f.help, labels=f.labels)
        for event, count in sorted(DAMPER.suppressed.items()):
            family.add_metric([self._node, event], float(count))
        yield family

