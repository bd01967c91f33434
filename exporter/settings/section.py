"""The base of every settings section, and the limits all sections share.

A leaf module: each collector declares its section class in its own module
(``exporter/collectors/<name>.py``) on this base, and ``exporter/wiring/config.py`` composes
``Settings`` from the registry, so neither needs the other's module to define a field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

MAX_INTERVAL = 3600.0
"""No interval may exceed an hour: a longer one reads as a source that stopped."""
LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
MAX_LABEL_CHARS = 4096
"""No string setting that reaches a label value may be longer (serving.max_label_length's
ceiling too)."""
"""A Prometheus label name, for settings that name one."""
NODE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""What ``node_name`` may hold: a host or Kubernetes node name (letters, digits, ``.``,
``_``, ``-``). It is on every series and in the process-session job ids, and ``top``
prints it."""


def printable_setting(value: str, what: str) -> str:
    """``value`` when every character prints; else ``ValueError`` naming ``what`` (a label
    value from the settings must not carry control characters to a terminal or a log)."""
    if not value.isprintable():
        raise ValueError(f"{what} {value[:64]!a} holds control or non-printing characters")
    return value


class Section(BaseModel):
    # No setting has a use for inf or NaN; an infinite interval would poll once, then never.
    # Field docstrings are the descriptions: the CLI's help text comes from them.
    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True
    )


MAX_SETTING_CHARS = 4096
"""No string a setting takes, from a flag, the environment or a file (a path, a name, a
secret, a mapping's key), may be longer: PATH_MAX, and the longest label value."""
MAX_SETTING_ITEMS = 10_000
"""No list or mapping a setting takes may hold more items (``serving.max_targets``'s own
ceiling)."""


def oversized(value: Any, path: str = "") -> str | None:
    """Why ``value`` (a settings tree, before validation) holds a string or a collection
    past the caps above, naming its key; None when it holds none. Checked before any field
    validator can echo a value into an error line."""
    if isinstance(value, str):
        if len(value) > MAX_SETTING_CHARS:
            return f"bad value for {path!r}: {len(value)} characters, more than {MAX_SETTING_CHARS}"
        return None
    if isinstance(value, (list, tuple, Mapping)) and len(value) > MAX_SETTING_ITEMS:
        return f"bad value for {path!r}: {len(value)} items, more than {MAX_SETTING_ITEMS}"
    if isinstance(value, Mapping):
        for key, item in value.items():
            name = f"{path}.{str(key)[:64]}" if path else str(key)[:64]
            problem = oversized(key, name + "...") or oversized(item, name)
            if problem:
                return problem
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            problem = oversized(item, f"{path}.{i}")
            if problem:
                return problem
    return None
