"""Configuration: one schema, three layers (YAML file < ``GOODPUT_*`` environment < flags).

The schema is a tree of pydantic models that forbid unknown keys, so a typo is an error
that names the key instead of a setting silently ignored. The daemon's own keys are
:class:`CoreSettings` (``exporter/settings/core.py``); every collector names its section
class (declared next to the code that reads it) and :func:`compose` adds one field per
section from the registry. This module is the composition root of the settings: nothing
below the daemon and the CLI imports it. README.md's configuration reference documents
them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ValidationError, create_model

from exporter.collectors import REGISTRY
from exporter.collectors.base import Collector
from exporter.settings import yamlfile
from exporter.settings.config_messages import describe_validation_error as describe_validation_error
from exporter.settings.core import DEFAULT_PORT as DEFAULT_PORT
from exporter.settings.core import MAX_NODE_NAME_CHARS
from exporter.settings.core import CoreSettings as CoreSettings
from exporter.settings.core import parse_listen as parse_listen
from exporter.settings.yamlfile import read_text as read_text

ENV_PREFIX = "GOODPUT_"
CLI_ONLY_ENV = ("GOODPUT_CONFIG", "GOODPUT_WEB_CONFIG_FILE")
"""Environment forms of the file-locating flags: read by the CLI, not settings keys."""
MAX_FILE_BYTES = yamlfile.MAX_BYTES
"""A config or web-config file longer than this is refused before it is parsed."""


class ConfigError(Exception):
    """A bad key or value; the message names it. The CLI exits 2 on this."""


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
        """For the type checker: the core keys, and a section by its name, untyped. Typed
        code reads a section by its type (``settings.section(ItsConfig)``), so no copy of
        the composed fields is kept: a new collector edits nothing here."""

        def __init__(self, **data: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

else:
    Settings = compose(REGISTRY)


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
        raise ConfigError(describe_validation_error(exc, Settings)) from exc


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
