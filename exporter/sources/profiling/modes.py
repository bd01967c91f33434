"""The profiling modes and backends, written once.

``config.py`` validates ``profiling.mode`` against :data:`MODES`, the CLI offers them as
choices, :mod:`build` turns one into sources and the snapshot orders backends by
:data:`BACKENDS` when several answer for one GPU.
"""

from __future__ import annotations

from typing import Literal, get_args

Mode = Literal["auto", "gpm", "dcgm", "dcgm-exporter", "off"]
MODES: tuple[str, ...] = get_args(Mode)

BACKENDS: tuple[str, ...] = ("gpm", "dcgm", "dcgm-exporter")
"""Preference order in ``auto``: NVML GPM (Hopper and newer, no extra daemon), the DCGM host
engine, then a dcgm-exporter already running on the node."""
