"""A second GPU vendor, whole in one module: what adding a GPU source takes.

It declares its settings section (with a flag), a reading that is a ``GpuReading`` (so the
snapshot lists its GPUs next to NVML's and the model judges them), a source that says it
lists GPUs and polls them (readiness and the model's step follow), one family of its own,
and the collector entry. Nothing else in the exporter changes. ``tests/support/scratch.py``
adds it as a contributor would: this file as ``exporter/collectors/vendor.py`` and its name
in ``exporter/settings/names.py`` (the one registry line), in a scratch copy of the package,
where ``tests/test_gpu_source.py`` runs the real daemon with every NVML collector off, on a
machine without a driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import Field

from exporter.collectors.base import Collector, Context, Flag, always
from exporter.metrics.families import GpuFamilies, Group, erase, gauge
from exporter.readings import Device, GpuReading, GpuState
from exporter.settings.section import Section
from exporter.snapshot import SourceResult
from exporter.sources.base import Source

if TYPE_CHECKING:
    from exporter.settings.core import CoreSettings

NAME = "vendor"
GIB = float(2**30)
DEVICES = (
    Device("v0", "VENDOR-0000-0000", name="Test Accelerator X1"),
    Device("v1", "VENDOR-0000-0001", name="Test Accelerator X1"),
)
STATES = {
    # busy (no profiling counters: the model says unknown rather than guess a bottleneck)
    "v0": GpuState(utilization=0.97, memory_used_bytes=40 * GIB, memory_total_bytes=64 * GIB,
                   power_watts=450.0, power_limit_watts=600.0, process_count=1),
    # nothing running, nothing held: idle
    "v1": GpuState(utilization=0.0, memory_used_bytes=0.0, memory_total_bytes=64 * GIB,
                   power_watts=60.0, power_limit_watts=600.0, process_count=0),
}


class VendorConfig(Section):
    """The test vendor's settings (its section lives here, with its collector)."""

    interval: float = Field(1.0, gt=0, le=60)
    """Seconds between polls of the test vendor's GPUs."""


@dataclass(frozen=True, slots=True)
class VendorReading(GpuReading):
    """What one poll of the test vendor read."""


class VendorSource(Source):
    name = NAME
    starts_first = True  # lists GPUs: the daemon is ready once it has
    gpu_poll = True  # each publish is a GPU poll: the model steps after it

    def __init__(self, interval: float) -> None:
        self.interval = interval

    async def poll(self) -> SourceResult:
        return SourceResult(source=self.name, reading=VendorReading(DEVICES, dict(STATES)))


FAMILIES = GpuFamilies[GpuState](
    NAME,
    lambda snap: {g: s for r in snap.all(VendorReading) for g, s in r.gpus.items()},
    (gauge("goodput_vendor_power_watts", "Power draw as the test vendor reads it.",
           lambda s: s.power_watts, unit="watts"),),
)


def _sources(ctx: Context) -> list[Source]:
    return [VendorSource(ctx.settings.section(VendorConfig).interval)]


def _families(_: CoreSettings) -> tuple[Group, ...]:
    return (erase(FAMILIES),)


COLLECTOR = Collector(
    NAME,
    "a test-only second GPU vendor",
    always,
    _sources,
    _families,
    readings=(VendorReading,),
    section=NAME,
    config=VendorConfig,
    flags=(Flag("--vendor-interval", "interval", "SECONDS"),),
    flag_group="test vendor",
)
