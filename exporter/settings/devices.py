"""Which of the host's GPUs this daemon owns (``devices``, ``--devices``), like dcgm-exporter's
``--devices``: two daemons with different node names can each own part of one host.

The selection is NVML indices (``0``, ranges ``0-3``) or UUIDs (``GPU-...``, ``MIG-...``). A
selected GPU keeps its real index as its ``gpu`` label, and brings its MIG instances with it.
Everything keyed by GPU follows, since every source reads the inventory the session lists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from exporter.readings import Device

RANGE = re.compile(r"^(\d+)-(\d+)$")
UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]+$")
MAX_RANGE = 1024
"""More GPUs than any host has: a range past it is a typo."""


class DeviceSelectionError(ValueError):
    """A selected index or UUID names no GPU of this host; the message says which."""


def parse(items: Iterable[object]) -> list[str]:
    """The setting's items, split on commas, ranges expanded, each checked for shape: an index
    or a UUID. Raises ValueError naming the first bad item."""
    out: list[str] = []
    for raw in items:
        for item in str(raw).split(","):
            out += _one(item.strip())
    return list(dict.fromkeys(out))


def _one(item: str) -> list[str]:
    if item.isdigit():
        return [str(int(item))]
    match = RANGE.match(item)
    if match:
        first, last = int(match[1]), int(match[2])
        if first > last or last - first >= MAX_RANGE:
            raise ValueError(f"GPU range {item!r} is not FIRST-LAST with FIRST <= LAST")
        return [str(i) for i in range(first, last + 1)]
    if UUID.match(item):
        return [item]
    raise ValueError(f"{item!r} is neither a GPU index (0, 0-3) nor a UUID (GPU-..., MIG-...)")


class _Handle(Protocol):
    @property
    def device(self) -> Device: ...


H = TypeVar("H", bound=_Handle)


def select(found: Sequence[H], wanted: Sequence[str]) -> list[H]:
    """The handles ``wanted`` names, in NVML order (all when it is empty): a GPU by index or
    UUID with its MIG instances, a MIG instance by its UUID. Raises DeviceSelectionError
    naming what matches nothing."""
    if not wanted:
        return list(found)
    chosen: set[str] = set()
    missing = []
    for item in wanted:
        hits = {h.device.uuid or h.device.gpu for h in found if _names(h.device, item)}
        parents = {h.device.uuid for h in found if h.device.gpu == item or
                   (h.device.uuid == item and not h.device.parent_uuid)}
        hits |= {h.device.uuid for h in found if h.device.parent_uuid in parents - {""}}
        if not hits:
            missing.append(item)
        chosen |= hits
    if missing:
        have = spans(int(h.device.gpu) for h in found if h.device.gpu.isdigit()) or "none"
        raise DeviceSelectionError(f"no GPU {', '.join(missing)} on this host (its GPUs: "
                                   f"{have}; nvidia-smi -L lists their UUIDs)")
    return [h for h in found if (h.device.uuid or h.device.gpu) in chosen]


def spans(indices: Iterable[int]) -> str:
    """``0, 1, 2, 5`` -> ``0-2,5``."""
    out: list[str] = []
    for i in sorted(set(indices)):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def _names(device: Device, item: str) -> bool:
    """Whether ``item`` (an index or a UUID) names ``device`` itself."""
    if item.isdigit():
        return device.gpu == item and not device.parent_uuid
    return device.uuid == item
