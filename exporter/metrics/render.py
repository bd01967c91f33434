"""Turns the latest snapshot into metric families (a client_python custom collector).

Rendering reads only the snapshot: no hardware and no network. The encoded exposition is
cached per snapshot version and format, so concurrent scrapers between two polls share one
rendering.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from exporter.metrics.catalog import CATALOG, DEVICE_BASE_LABELS, MetricSpec
from exporter.snapshot import Labels, Sample, Snapshot, SnapshotStore

log = structlog.get_logger("render")


class SnapshotCollector(Collector):
    """Yields one family per catalog entry that has samples in the snapshot.

    ``attribution_labels`` are the label names (after any renaming the user configured)
    appended to every per-device series, in this order; a device without attribution gets
    empty values so each device keeps one stable label set.
    """

    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        attribution_labels: Sequence[str] = (),
    ) -> None:
        self._snapshot = snapshot
        self._attribution_labels = tuple(attribution_labels)
        self._unknown_logged: set[str] = set()

    def describe(self) -> list[Metric]:
        return []  # families vary with the snapshot; skip describe-time collection

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        grouped: dict[str, list[tuple[Sample, tuple[str, ...]]]] = defaultdict(list)
        node = snap.node_name
        inventory = {d.gpu: d for d in snap.inventory}
        attribution = snap.device_labels
        for result in snap.results.values():
            for sample in result.node:
                grouped[sample.name].append((sample, (node,)))
            for gpu, samples in result.devices.items():
                device = inventory.get(gpu)
                uuid = device.uuid if device else ""
                extra = self._attribution_values(attribution.get(gpu, ()))
                base = (gpu, uuid, node, *extra)
                for sample in samples:
                    grouped[sample.name].append((sample, self._own_attribution(sample, base)))
        for name in sorted(grouped):
            spec = CATALOG.get(name)
            if spec is None:
                if name not in self._unknown_logged:
                    self._unknown_logged.add(name)
                    log.error("metric_not_in_catalog", metric=name)
                continue
            yield self._family(spec, grouped[name])

    def _attribution_values(self, pairs: Labels) -> tuple[str, ...]:
        if not self._attribution_labels:
            return ()
        values = dict(pairs)
        return tuple(values.get(label, "") for label in self._attribution_labels)

    def _own_attribution(self, sample: Sample, base: tuple[str, ...]) -> tuple[str, ...]:
        """A per-pod sample (pod memory on a shared GPU) names its own pod: its values of
        attribution labels replace the device's."""
        if not self._attribution_labels or not sample.labels:
            return base
        own = dict(sample.labels)
        if not any(label in own for label in self._attribution_labels):
            return base
        head = len(DEVICE_BASE_LABELS)
        return (
            *base[:head],
            *(
                own.get(label, value)
                for label, value in zip(self._attribution_labels, base[head:], strict=True)
            ),
        )

    def base_label_names(self, spec: MetricSpec) -> list[str]:
        if spec.scope == "node":
            return ["node"]
        return [*DEVICE_BASE_LABELS, *self._attribution_labels]

    def _family(self, spec: MetricSpec, rows: list[tuple[Sample, tuple[str, ...]]]) -> Metric:
        names = [*self.base_label_names(spec), *spec.labels]
        family: Metric
        if spec.type == "counter":
            family = CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=names)
        else:
            family = GaugeMetricFamily(spec.name, spec.help, labels=names, unit="")
        seen: set[tuple[str, ...]] = set()
        for sample, base in rows:
            extra = dict(sample.labels)
            values = (*base, *(extra.get(label, "") for label in spec.labels))
            if values in seen:
                # Two sources can briefly hold the same series (a GPU handed from one
                # profiling source to another): the first, in source order, wins.
                continue
            seen.add(values)
            family.add_metric(list(values), sample.value)  # type: ignore[attr-defined]
        return family


class ExpositionCache:
    """Encodes the registry once per (snapshot version, format)."""

    def __init__(self, registry: CollectorRegistry, store: SnapshotStore) -> None:
        self._registry = registry
        self._store = store
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[int, bytes, str]] = {}

    def cached(self, accept: str | None) -> tuple[bytes, str] | None:
        """The encoded exposition if the current snapshot was already encoded, else None."""
        _, content_type = choose_encoder(accept or "")
        hit = self._cache.get(content_type)
        if hit is not None and hit[0] == self._store.current.version:
            return hit[1], hit[2]
        return None

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """Encode (or reuse) the exposition; a few ms for a node, so callers on an event loop
        run it in a thread when :meth:`cached` misses."""
        encoder, content_type = choose_encoder(accept or "")
        version = self._store.current.version
        with self._lock:
            cached = self._cache.get(content_type)
            if cached is not None and cached[0] == version:
                return cached[1], cached[2]
            body = encoder(self._registry)
            self._cache[content_type] = (version, body, content_type)
            return body, content_type
