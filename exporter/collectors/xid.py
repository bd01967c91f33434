"""XID critical-error events per GPU."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.collectors.base import Collector, Context, always
from exporter.readings import XidReading

if TYPE_CHECKING:
    from exporter.metrics.families import Group
    from exporter.settings.core import CoreSettings
    from exporter.sources.base import Source


def _sources(ctx: Context) -> list[Source]:
    from exporter.sources.nvml_session import NvmlSession
    from exporter.sources.xid import XidSource

    return [XidSource(ctx.shared.get(NvmlSession), interval=ctx.settings.interval)]


def _families(_: CoreSettings) -> tuple[Group, ...]:
    from exporter.metrics.families import erase
    from exporter.sources.xid import FAMILIES

    return (erase(FAMILIES),)


COLLECTOR = Collector(
    "xid", "XID critical-error events", always, _sources, _families, readings=(XidReading,)
)
