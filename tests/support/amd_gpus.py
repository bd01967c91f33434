"""AMD GPUs from the amdgpu driver's sysfs files, whole in one module: the GPU-source recipe of
docs/architecture.md followed to the letter, for ``tests/test_gpu_source_recipe.py``.

It is what a contributor adds as ``exporter/collectors/amd.py`` with ``amd`` in
``COLLECTOR_NAMES``: a settings section (where the sysfs tree is), a ``GpuReading``
subclass, a source that lists GPUs (``starts_first``) and polls them (``gpu_poll``), and the
collector entry. It declares no family of its own: what its GPUs show on /metrics is what
any GPU source's readings give. It uses only what the recipe names, so the same file runs
against an older tree to show what that tree lacked.

The files are amdgpu's (``/sys/class/drm/card<N>/device``): ``vendor`` (0x1002),
``unique_id``, ``product_name``, ``gpu_busy_percent``, ``mem_busy_percent``,
``mem_info_vram_used`` / ``_total`` (bytes), and under ``hwmon/hwmon<M>``: ``power1_average``
and ``power1_cap`` (microwatts), ``energy1_input`` (microjoules), ``temp1_input``
(millidegrees Celsius). A file that is missing or unreadable leaves its field None.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from exporter.collectors.base import Collector, Context, Flag, always
from exporter.readings import Device, GpuReading, GpuState
from exporter.settings.section import Section
from exporter.snapshot import SourceResult
from exporter.sources.base import BlockingSource, Source

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings

NAME = "amd"
AMD_VENDOR = "0x1002"
MAX_FILE_BYTES = 4096
"""A sysfs attribute is one short line; more is not read (a hostile tree costs nothing)."""


class AmdConfig(Section):
    """AMD GPUs read from the amdgpu driver's sysfs files."""

    sysfs_root: str = Field("/sys", max_length=4096)
    """Directory holding class/drm/card*/device (the host's /sys)."""
    interval: float = Field(1.0, gt=0, le=60)
    """Seconds between polls of the AMD GPUs."""


@dataclass(frozen=True, slots=True)
class AmdReading(GpuReading):
    """What one poll of the amdgpu sysfs files read."""


def _text(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            return f.read(MAX_FILE_BYTES).decode("ascii", "replace").strip()
    except OSError:
        return None


def _number(path: Path, scale: float = 1.0) -> float | None:
    text = _text(path)
    try:
        return None if text is None else float(text) * scale
    except ValueError:
        return None


class AmdSource(BlockingSource):
    name = NAME
    starts_first = True  # lists GPUs: the daemon is ready once it has
    gpu_poll = True  # each publish is a GPU poll: the model steps after it

    def __init__(self, root: str, interval: float) -> None:
        super().__init__()
        self.root = Path(root)
        self.interval = interval
        self._busy_seconds: dict[str, float] = {}
        self._last: float | None = None

    def _cards(self) -> list[Path]:
        cards = sorted((self.root / "class" / "drm").glob("card[0-9]*"),
                       key=lambda p: int(p.name[4:]) if p.name[4:].isdigit() else 1 << 30)
        return [c / "device" for c in cards
                if c.name[4:].isdigit() and _text(c / "device" / "vendor") == AMD_VENDOR]

    def poll_blocking(self) -> SourceResult:
        now = time.monotonic()
        elapsed = 0.0 if self._last is None else now - self._last
        self._last = now
        devices, states = [], {}
        for index, dev in enumerate(self._cards()):
            gpu = f"amd{index}"
            slot = next((line.split("=", 1)[1] for line in (_text(dev / "uevent") or "").split()
                         if line.startswith("PCI_SLOT_NAME=")), "")
            devices.append(Device(gpu, _text(dev / "unique_id") or f"AMD-{slot}",
                                  name=_text(dev / "product_name") or "", pci_bus_id=slot))
            hwmon = next(iter(sorted((dev / "hwmon").glob("hwmon*"))), dev / "hwmon" / "none")
            busy = _number(dev / "gpu_busy_percent", 0.01)
            if busy is not None:
                self._busy_seconds[gpu] = self._busy_seconds.get(gpu, 0.0) + busy * elapsed
            states[gpu] = GpuState(
                utilization=busy,
                utilization_seconds=self._busy_seconds.get(gpu),
                memory_controller_utilization=_number(dev / "mem_busy_percent", 0.01),
                memory_used_bytes=_number(dev / "mem_info_vram_used"),
                memory_total_bytes=_number(dev / "mem_info_vram_total"),
                power_watts=_number(hwmon / "power1_average", 1e-6),
                power_limit_watts=_number(hwmon / "power1_cap", 1e-6),
                energy_joules=_number(hwmon / "energy1_input", 1e-6),
                temperature_celsius=_number(hwmon / "temp1_input", 1e-3),
            )
        return SourceResult(source=self.name, reading=AmdReading(tuple(devices), states))


def _sources(ctx: Context) -> list[Source]:
    config = ctx.settings.section(AmdConfig)
    return [AmdSource(config.sysfs_root, config.interval)]


def _families(_: CoreSettings) -> tuple[Group, ...]:
    return ()  # none of its own: its GPUs get the vendor-neutral series


COLLECTOR = Collector(
    NAME,
    "AMD GPUs from the amdgpu driver's sysfs files",
    always,
    _sources,
    _families,
    readings=(AmdReading,),
    section=NAME,
    config=AmdConfig,
    flags=(Flag("--amd-sysfs-root", "sysfs_root", "DIR"),
           Flag("--amd-interval", "interval", "SECONDS")),
    flag_group="AMD GPUs",
)


def write_tree(root: Path, cards: list[dict[str, str]]) -> Path:
    """A fake /sys with one amdgpu card per entry (file name -> content, ``hwmon/`` files
    under the card's hwmon0), and one card of another vendor that must be skipped."""
    for index, files in enumerate(cards):
        dev = root / "class" / "drm" / f"card{index}" / "device"
        (dev / "hwmon" / "hwmon0").mkdir(parents=True)
        (dev / "vendor").write_text(AMD_VENDOR + "\n")
        for name, content in files.items():
            (dev / name).write_text(content + "\n")
    other = root / "class" / "drm" / f"card{len(cards)}" / "device"
    other.mkdir(parents=True)
    (other / "vendor").write_text("0x8086\n")
    return root
