"""The profiling modes and backends, written once.

The profiling collector's section (``exporter/collectors/profiling.py``) validates
``profiling.mode`` against :data:`Mode`, the CLI offers its values as choices, :mod:`build`
turns one into sources and the snapshot orders backends by :data:`BACKENDS` when several
answer for one GPU. A leaf module: the settings import it.
"""

from __future__ import annotations

from typing import Literal, get_args

Mode = Literal["auto", "gpm", "dcgm", "dcgm-exporter", "off"]
"""Where profiling counters come from (``profiling.mode``): a backend, ``auto`` (one per
GPU) or ``off``."""
MODES: tuple[str, ...] = get_args(Mode)

BACKENDS: tuple[str, ...] = tuple(m for m in MODES if m not in ("auto", "off"))
"""Preference order in ``auto``: NVML GPM (Hopper and newer, no extra daemon), the DCGM host
engine, then a dcgm-exporter already running on the node."""
