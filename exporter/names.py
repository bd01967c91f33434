"""Names the settings are checked against: collectors (the registry), serving engines,
profiling modes.

A leaf module (it imports nothing from the exporter) so that ``config.py`` can validate
against these without importing the collectors and sources, which import ``config``.
tests/test_config_imports.py checks each list against the code that defines the thing.
"""

from __future__ import annotations

from typing import Literal, get_args

COLLECTOR_NAMES: tuple[str, ...] = (
    "nvml", "xid", "profiling", "kubelet", "cgroup", "jobs", "serving", "model"
)
"""The collector registry, in order: the only list of collectors. Each name is a module
``exporter/collectors/<name>.py`` whose ``COLLECTOR`` declares it; adding a collector is
that module and one name here."""

ENGINE_NAMES: frozenset[str] = frozenset({
    "llama.cpp", "lmdeploy", "nim", "ray-vllm", "sglang", "tgi", "triton", "triton-vllm",
    "trtllm-serve", "vllm",
})
"""Every engine of ``exporter.sources.serving.engines.TABLES``."""

Mode = Literal["auto", "gpm", "dcgm", "dcgm-exporter", "off"]
"""Where profiling counters come from (``profiling.mode``)."""
MODES: tuple[str, ...] = get_args(Mode)
