"""Declared mappings from typed readings to metric families.

A collector declares its families next to the reading they come from: each
:class:`Family` says how one reading turns into rows (own label values, value). A
:class:`GpuFamilies` group binds families to a per-GPU view of the snapshot, a
:class:`NodeFamilies` group to a node-wide one. The catalog (``docs/metrics.md``) and the
exposition both walk these groups, so what is documented is what is served.

Every per-GPU series carries ``gpu`` and ``node`` and its own labels, nothing more: identity
lives on ``goodput_gpu_info`` and pods on ``goodput_gpu_pod_info`` (joined in PromQL), which
keeps the series count and bytes per GPU small.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from exporter.snapshot import Snapshot

R = TypeVar("R")
Row = tuple[tuple[str, ...], float]
MetricType = Literal["gauge", "counter"]

GPU_LABELS: tuple[str, ...] = ("gpu", "node")
NODE_LABELS: tuple[str, ...] = ("node",)


@dataclass(frozen=True)
class Family(Generic[R]):
    name: str
    type: MetricType
    help: str
    rows: Callable[[R], Iterable[Row]]
    labels: tuple[str, ...] = ()
    unit: str = ""
    default: bool = True
    """In the default set; families off by default are switched on with a collector option."""

    def __post_init__(self) -> None:
        if not self.name.startswith("goodput_"):
            raise ValueError(f"metric {self.name} must start with goodput_")
        if (self.type == "counter") != self.name.endswith("_total"):
            raise ValueError(f"{self.name}: counters, and only counters, end in _total")


def _scalar(value: float | bool | None) -> Iterable[Row]:
    if value is None:
        return ()
    return (((), float(value)),)


def gauge(
    name: str,
    help: str,
    value: Callable[[R], float | bool | None],
    *,
    unit: str = "",
    default: bool = True,
) -> Family[R]:
    """A family with one unlabelled series per reading (absent while ``value`` is None)."""
    return Family(name, "gauge", help, lambda r: _scalar(value(r)), unit=unit, default=default)


def counter(
    name: str,
    help: str,
    value: Callable[[R], float | None],
    *,
    unit: str = "",
    default: bool = True,
) -> Family[R]:
    return Family(name, "counter", help, lambda r: _scalar(value(r)), unit=unit, default=default)


def by_label(
    name: str,
    type: MetricType,
    help: str,
    label: str,
    pairs: Callable[[R], Iterable[tuple[str, float | bool]]],
    *,
    unit: str = "",
    default: bool = True,
) -> Family[R]:
    """A family with one series per (label value, value) pair of the reading."""

    def rows(r: R) -> Iterable[Row]:
        return (((key,), float(v)) for key, v in pairs(r))

    return Family(name, type, help, rows, labels=(label,), unit=unit, default=default)


@dataclass(frozen=True)
class GpuFamilies(Generic[R]):
    """Families read from one per-GPU reading; ``readings`` picks them from the snapshot."""

    collector: str
    readings: Callable[[Snapshot], Mapping[str, R]]
    families: tuple[Family[R], ...]
    scope: Literal["gpu"] = "gpu"


@dataclass(frozen=True)
class NodeFamilies(Generic[R]):
    """Families read from one node-wide reading (None: nothing to publish)."""

    collector: str
    reading: Callable[[Snapshot], R | None]
    families: tuple[Family[R], ...]
    scope: Literal["node"] = "node"


Group = GpuFamilies[object] | NodeFamilies[object]
"""Any family group, erased to object: the encoder only passes readings to rows()."""


def erase(group: GpuFamilies[R] | NodeFamilies[R]) -> Group:
    """Type-erase a group for a heterogeneous list (each group stays internally typed)."""
    return group  # type: ignore[return-value]
