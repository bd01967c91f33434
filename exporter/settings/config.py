"""Configuration: one schema, three layers (YAML file < ``GOODPUT_*`` environment < flags).

The schema is a tree of pydantic models that forbid unknown keys, so a typo is an error
that names the key instead of a setting silently ignored. The daemon's own keys are
:class:`CoreSettings`; every collector declares its section class in its own module
(``exporter/collectors/<name>.py``) and :func:`compose` adds one field per section from the
registry, so a collector's settings live with its code. README.md's configuration reference
documents them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
)

from exporter.collectors import REGISTRY
from exporter.collectors.base import Collector

# The section classes, defined in their collectors' modules, under the names readers used
# before they moved there (exporter/sources/serving/ imports them from here).
from exporter.collectors.jobs import JobsConfig as JobsConfig
from exporter.collectors.kubelet import KubernetesConfig as KubernetesConfig
from exporter.collectors.model import ModelConfig as ModelConfig
from exporter.collectors.profiling import ProfilingConfig as ProfilingConfig
from exporter.collectors.serving import Authorization as Authorization
from exporter.collectors.serving import BasicAuth as BasicAuth
from exporter.collectors.serving import ServingConfig as ServingConfig
from exporter.collectors.serving import ServingTarget as ServingTarget
from exporter.collectors.serving import TlsConfig as TlsConfig
from exporter.settings import devices, names, yamlfile
from exporter.settings.config_messages import message
from exporter.settings.section import MAX_INTERVAL as MAX_INTERVAL
from exporter.settings.section import MAX_LABEL_CHARS as MAX_LABEL_CHARS
from exporter.settings.section import NODE_NAME
from exporter.settings.section import Section as Section

ENV_PREFIX = "GOODPUT_"
CLI_ONLY_ENV = ("GOODPUT_CONFIG", "GOODPUT_WEB_CONFIG_FILE")
"""Environment forms of the file-locating flags: read by the CLI, not settings keys."""
DEFAULT_PORT = 9433
"""Default port: clear of node_exporter (9100), dcgm-exporter (9400) and
nvidia_gpu_exporter (9835)."""
MAX_NODE_NAME_CHARS = 253
"""A Kubernetes node name is a DNS subdomain: at most 253 characters. It is on every series."""
MAX_FILE_BYTES = yamlfile.MAX_BYTES
"""A config or web-config file longer than this is refused before it is parsed."""

S = TypeVar("S", bound=Section)


class ConfigError(Exception):
    """A bad key or value; the message names it. The CLI exits 2 on this."""


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


def compose(registry: Iterable[Collector]) -> type[CoreSettings]:
    """``Settings``: the core keys plus one field per collector section, named by
    ``Collector.section``, typed and defaulted by ``Collector.config``."""
    fields: dict[str, Any] = {
        c.section: (c.config, c.config()) for c in registry if c.section and c.config
    }
    model: type[CoreSettings] = create_model(
        "Settings", __base__=CoreSettings, __module__=__name__, **fields
    )
    return model


if TYPE_CHECKING:

    class Settings(CoreSettings):
        """What :func:`compose` builds from the registry, spelled out for the type checker
        (tests/test_config.py checks the two agree). A collector added later reads its
        section with :meth:`CoreSettings.section`."""

        profiling: ProfilingConfig = ProfilingConfig()
        kubernetes: KubernetesConfig = KubernetesConfig()
        jobs: JobsConfig = JobsConfig()
        serving: ServingConfig = ServingConfig()
        model: ModelConfig = ModelConfig()

else:
    Settings = compose(REGISTRY)


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


def read_text(path: str | Path, what: str) -> str:
    """A file's UTF-8 text; ``what`` names it in the ValueError a bad file gives."""
    from exporter.settings.section import MAX_SETTING_CHARS

    if len(str(path)) > MAX_SETTING_CHARS:
        raise ValueError(f"{what} path {str(path)[:64]!r}... is longer than {MAX_SETTING_CHARS}")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{what} {path}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"{what} {path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{what} {path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from exc


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line report as one line: the problem and where it is."""
    return yamlfile.describe(exc)


def load_file(path: str | Path) -> dict[str, Any]:
    try:
        text = read_text(path, "config file")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    try:
        data = yamlfile.parse(text)
    except yamlfile.YamlError as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping")
    return data


def from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """``GOODPUT_INTERVAL=2`` -> {"interval": 2}; ``GOODPUT_SERVING__TIMEOUT`` nests.

    Values are parsed as YAML scalars/flow collections so lists work
    (``GOODPUT_SERVING__TARGETS='[{url: http://...}]'``). Variables that name no setting
    are left out (see :func:`ignored_env`): Kubernetes injects ``<SERVICE>_PORT=tcp://...``
    variables for every service, and one named like ours must not stop the exporter.
    """
    out: dict[str, Any] = {}
    for key, raw in environ.items():
        path = _env_path(key)
        if path is None:
            continue
        try:
            value = yamlfile.parse(raw) if raw.strip() else raw
        except yamlfile.YamlError:
            value = raw
        if isinstance(value, (int, float, bool, list, dict)) or value is None:
            parsed: Any = value
        else:
            parsed = raw
        _set_path(out, path, parsed, origin=key)
    return out


def ignored_env(environ: Mapping[str, str]) -> list[str]:
    """``GOODPUT_*`` variables that name no setting (the CLI warns about them)."""
    return sorted(
        key
        for key in environ
        if key.startswith(ENV_PREFIX) and key not in CLI_ONLY_ENV and _env_path(key) is None
    )


def _env_path(key: str) -> list[str] | None:
    """The settings path a variable names, or None when it names none."""
    if not key.startswith(ENV_PREFIX) or key in CLI_ONLY_ENV:
        return None
    path = key[len(ENV_PREFIX) :].lower().split("__")
    model: Any = Settings
    for part in path[:-1]:
        field_info = model.model_fields.get(part)
        annotation = getattr(field_info, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return path if path[-1] in model.model_fields else None


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
    """Resolve settings from the three layers, or raise :class:`ConfigError`. Every value
    passes the caps of exporter/settings/section.py before any validator may echo it."""
    from exporter.settings.section import oversized

    file_layer = load_file(config_file) if config_file else {}
    env_layer = from_env(os.environ if environ is None else environ)
    tree = merge(file_layer, env_layer, flags)
    problem = oversized(tree) or _node_name_env(tree)
    if problem:
        raise ConfigError(problem)
    try:
        return Settings.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from exc


def _node_name_env(tree: Mapping[str, Any]) -> str | None:
    """Why ``$NODE_NAME`` (the default node name, read by the field itself) is refused,
    said so the operator knows where the value came from."""
    value = os.environ.get("NODE_NAME", "")
    if "node_name" in tree or len(value) <= MAX_NODE_NAME_CHARS:
        return None
    return (
        f"bad value for 'node_name' (from $NODE_NAME): {len(value)} characters, more than "
        f"{MAX_NODE_NAME_CHARS}"
    )


def describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown config key {key!r}")
        else:
            parts.append(f"bad value for {key!r}: {message(err)}")
    return "; ".join(parts)
