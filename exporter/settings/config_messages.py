"""One validation error in a person's words: ``bad value for 'interval': must be at most 60
seconds``, not pydantic's ``Input should be less than or equal to 60`` or its
``Value error, ...`` prefix. Only the wording: which values are valid stays in the settings
schema (``exporter/settings/config.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

BOUNDS = {
    "less_than_equal": ("le", "at most"),
    "less_than": ("lt", "less than"),
    "greater_than_equal": ("ge", "at least"),
    "greater_than": ("gt", "more than"),
}


def _unit(loc: Sequence[Any]) -> str:
    """" seconds" for keys that hold seconds (every interval and timeout)."""
    name = str(loc[-1]) if loc else ""
    seconds = name.endswith(("interval", "timeout", "_seconds"))
    return " seconds" if seconds else ""


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def message(err: Mapping[str, Any]) -> str:
    """The words for one of ``ValidationError.errors()``."""
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    if kind in BOUNDS and BOUNDS[kind][0] in ctx:
        key, words = BOUNDS[kind]
        return f"must be {words} {_number(ctx[key])}{_unit(err.get('loc', ()))}"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    text = str(err.get("msg", ""))
    return text.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown config key {key!r}")
        else:
            parts.append(f"bad value for {key!r}: {message(err)}")
    return "; ".join(parts)
