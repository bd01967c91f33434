"""Configuration: one schema, three layers (YAML file < ``GOODPUT_*`` environment < flags).

The schema is a tree of pydantic models that forbid unknown keys, so a typo is an error
that names the key instead of a setting silently ignored. Each section belongs to one
source and is documented in README.md's configuration reference.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

ENV_PREFIX = "GOODPUT_"
DEFAULT_PORT = 9433
"""Default port: clear of node_exporter (9100), dcgm-exporter (9400) and
nvidia_gpu_exporter (9835)."""


class ConfigError(Exception):
    """A bad key or value; the message names it. The CLI exits 2 on this."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServingTarget(Section):
    url: str
    gpus: list[str] = Field(default_factory=list)
    engine: str = ""
    model: str = ""


class ServingConfig(Section):
    """Scraping serving engines (vLLM, SGLang, TGI, Triton, ...)."""

    targets: list[ServingTarget] = Field(default_factory=list)
    interval: float = Field(5.0, gt=0)
    timeout: float = Field(2.0, gt=0)
    max_body_bytes: int = Field(8 * 1024 * 1024, gt=0)
    max_concurrency: int = Field(8, gt=0)


class KubernetesConfig(Section):
    """Attribution of GPUs and processes to pods."""

    enabled: bool = False
    kubelet_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    interval: float = Field(10.0, gt=0)


class ProfilingConfig(Section):
    """Which source fills the profiling counters (SM active, tensor, DRAM, ...)."""

    mode: Literal["auto", "gpm", "dcgm", "dcgm-exporter", "off"] = "auto"


class ModelConfig(Section):
    """Thresholds of the efficiency model; see docs/efficiency.md."""


class Settings(Section):
    listen: str = f":{DEFAULT_PORT}"
    simulate: bool = False
    interval: float = Field(1.0, ge=0.1, le=60)
    log_format: Literal["json", "console"] = "json"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    node_name: str = Field(default_factory=lambda: os.environ.get("NODE_NAME", "") or _hostname())
    simulate_gpus: int = Field(8, ge=1, le=64)
    serving: ServingConfig = ServingConfig()
    kubernetes: KubernetesConfig = KubernetesConfig()
    profiling: ProfilingConfig = ProfilingConfig()
    model: ModelConfig = ModelConfig()

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        parse_listen(value)
        return value


def _hostname() -> str:
    import socket

    return socket.gethostname()


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``[v6]:PORT`` to (host, port); host "" means all."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"listen address {value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def load_file(path: str | Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping")
    return data


def from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """``GOODPUT_INTERVAL=2`` -> {"interval": "2"}; ``GOODPUT_SERVING__TIMEOUT`` nests.

    Values are parsed as YAML scalars/flow collections so lists work
    (``GOODPUT_SERVING__TARGETS='[{url: http://...}]'``).
    """
    out: dict[str, Any] = {}
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        path = key[len(ENV_PREFIX) :].lower().split("__")
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        if isinstance(value, (int, float, bool, list, dict)) or value is None:
            parsed: Any = value
        else:
            parsed = raw
        _set_path(out, path, parsed, origin=key)
    return out


def _set_path(tree: dict[str, Any], path: list[str], value: Any, origin: str) -> None:
    node = tree
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{origin}: conflicts with another setting for {part}")
        node = child
    node[path[-1]] = value


def merge(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge mappings; later layers win key by key."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            else:
                out[key] = value
    return out


def build(
    flags: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    config_file: str | None = None,
) -> Settings:
    """Resolve settings from the three layers, or raise :class:`ConfigError`."""
    file_layer = load_file(config_file) if config_file else {}
    env_layer = from_env(os.environ if environ is None else environ)
    try:
        return Settings.model_validate(merge(file_layer, env_layer, flags))
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from exc


def describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown config key {key!r}")
        else:
            parts.append(f"bad value for {key!r}: {err['msg']}")
    return "; ".join(parts)
