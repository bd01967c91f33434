"""What the NCCL source publishes: collectives per GPU, and whether RAS answered."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.metrics.families import GpuFamilies, NodeFamilies, by_label, counter, gauge
from exporter.readings import CollectiveReading, CollectiveState
from exporter.snapshot import Snapshot
from exporter.sources.nccl.source import SOURCE


def _gpus(snap: Snapshot) -> Mapping[str, CollectiveState]:
    reading = snap.get(CollectiveReading)
    return {} if reading is None else reading.gpus


GPU_FAMILIES = GpuFamilies[CollectiveState](
    SOURCE,
    _gpus,
    (
        counter(
            "goodput_gpu_collectives_total",
            "NCCL collectives (all-reduce, all-gather, reduce-scatter, broadcast, reduce) the "
            "processes on this GPU launched since the exporter first saw their communicators, "
            "as NCCL's RAS counts them; send and receive are not counted.",
            lambda s: s.total,
        ),
    ),
)

NODE_FAMILIES = NodeFamilies[CollectiveReading](
    SOURCE,
    lambda snap: snap.get(CollectiveReading),
    (
        gauge(
            "goodput_nccl_ras_answered",
            "1 when an NCCL RAS endpoint answered the last poll; 0 when none listens (no "
            "NCCL 2.28+ job on this node, RAS turned off, or its port out of reach).",
            lambda r: r.answered,
        ),
        gauge(
            "goodput_nccl_communicators",
            "NCCL communicators with a rank on this node's GPUs, tracked now.",
            lambda r: float(r.communicators),
        ),
        by_label(
            "goodput_nccl_dropped_total",
            "counter",
            "RAS input refused, by reason (max_communicators, max_pods, too_large, implausible: a "
            "count rising faster than a GPU launches collectives).",
            "reason",
            lambda r: r.dropped,
        ),
    ),
)
