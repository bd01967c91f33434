"""The profiling modes and backends, written once.

``config.py`` validates ``profiling.mode`` against :data:`MODES` (kept in the leaf
:mod:`exporter.names` so config imports no source), the CLI offers them as
choices, :mod:`build` turns one into sources and the snapshot orders backends by
:data:`BACKENDS` when several answer for one GPU.
"""

from __future__ import annotations

from exporter.names import MODES as MODES
from exporter.names import Mode as Mode

BACKENDS: tuple[str, ...] = ("gpm", "dcgm", "dcgm-exporter")
"""Preference order in ``auto``: NVML GPM (Hopper and newer, no extra daemon), the DCGM host
engine, then a dcgm-exporter already running on the node."""
