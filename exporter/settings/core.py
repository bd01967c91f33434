"""The daemon's own keys (:class:`CoreSettings`), below the collector registry.

Collectors and sources type their ``settings`` as ``CoreSettings`` and read their own
section with :meth:`CoreSettings.section`, so none of them imports the composed
``Settings`` (``exporter/wiring/config.py``, the composition root, which imports them).
"""

from __future__ import annotations

import os
import re
from typing import Literal, TypeVar

from pydantic import Field, ValidationInfo, field_validator

from exporter.settings import devices, names
from exporter.settings.section import NODE_NAME, Section

DEFAULT_PORT = 9433
"""Default port: clear of node_exporter (9100), dcgm-exporter (9400) and
nvidia_gpu_exporter (9835)."""
MAX_NODE_NAME_CHARS = 253
"""A Kubernetes node name is a DNS subdomain: at most 253 characters. It is on every series."""
S = TypeVar("S", bound=Section)


class CoreSettings(Section):
    """The daemon's own keys; the collectors' sections are added by :func:`compose`."""

    listen: str = f":{DEFAULT_PORT}"
    """Address to serve /metrics on; port 0 picks a free port and logs it."""
    simulate: bool = False
    """Run on the built-in simulated node (one workload per GPU) instead of NVML."""
    interval: float = Field(1.0, ge=0.1, le=60)
    """GPU poll interval in seconds."""
    log_format: Literal["json", "console"] = "json"
    """Log format."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Lowest log level written."""
    node_name: str = Field(
        default_factory=lambda: os.environ.get("NODE_NAME", "") or _hostname(),
        max_length=MAX_NODE_NAME_CHARS,
        validate_default=True,
    )
    """Value of the node label (default $NODE_NAME or the hostname)."""
    devices: list[str] = Field(default_factory=list)
    """GPUs this daemon owns, as NVML indices (0, 0-3) or UUIDs, comma-separated (default
    all): two daemons with different node names can each own part of one host."""
    # The default is one GPU per workload of exporter/sim/patterns.py NODE.
    simulate_gpus: int = Field(12, ge=1, le=64)
    """Number of simulated GPUs."""
    simulate_engines: bool = False
    """With simulate: also serve two simulated vLLM engines from this process and scrape
    them (2,400 tokens/s on GPU 3; none on the busy GPU 2), so tokens/s and J/token show;
    their targets replace serving.targets."""
    collectors: dict[str, bool] = Field(default_factory=dict)
    """Collectors switched on (true) or off (false) against their default; see --help."""
    extended_metrics: bool = False
    """Also publish the optional families (docs/metrics.md marks them): every pipe,
    per-window gauges next to their counters, clock-event states, remapped rows."""
    debug_state: bool = True
    """Serve /debug/state (the snapshot as JSON); the Helm chart turns it off."""

    def section(self, kind: type[S]) -> S:
        """The section of type ``kind`` (how a collector reads its own, typed)."""
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, kind):
                return value
        raise KeyError(f"no settings section of type {kind.__name__}")

    @field_validator("collectors")
    @classmethod
    def _known_collectors(cls, value: dict[str, bool]) -> dict[str, bool]:
        known = names.COLLECTOR_NAMES
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(f"unknown collector(s) {unknown}; known: {', '.join(known)}")
        return value

    @field_validator("simulate_engines")
    @classmethod
    def _engines_need_the_simulated_node(cls, value: bool, info: ValidationInfo) -> bool:
        if value and not info.data.get("simulate"):
            raise ValueError("needs simulate (the engines feed the simulated node's GPUs 2 "
                             "and 3): add --simulate")
        return value

    @field_validator("devices", mode="before")
    @classmethod
    def _parse_devices(cls, value: object) -> list[str]:
        items = value if isinstance(value, (list, tuple)) else [value]
        return devices.parse(items)

    @field_validator("node_name")
    @classmethod
    def _safe_node_name(cls, value: str) -> str:
        """Letters, digits, ``.``, ``_``, ``-`` (docs/security.md): the node name is on
        every series, inside process-session job ids and printed by ``top``."""
        if not re.fullmatch(NODE_NAME, value):
            raise ValueError(
                f"node name {value[:64]!a} must be letters, digits, '.', '_' or '-', "
                "starting with a letter or digit (set --node-name or NODE_NAME)"
            )
        return value

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        parse_listen(value)
        return value


def _hostname() -> str:
    import socket

    return socket.gethostname()


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``[v6]:PORT`` to (host, port); host "" means all, port 0
    a free port the kernel picks (the daemon logs which)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"listen address {value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)
