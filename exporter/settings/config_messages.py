"""One validation error in a person's words: ``bad value for 'interval': must be at most 60
seconds``, not pydantic's ``Input should be less than or equal to 60`` or its
``Value error, ...`` prefix. Only the wording: which values are valid stays in the settings
schema (``exporter/wiring/config.py``)."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

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


def _model_at(model: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """The section model that holds the key at ``loc`` (list indexes and dict keys are
    stepped over), or None where the path leaves the schema."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(current, type)
                                          and issubclass(current, BaseModel)):
            continue
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        current = _inner_model(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    """The model inside ``X | None``, ``list[X]``, ``dict[str, X]``; else the annotation."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, tuple, dict,
                                         Sequence, Mapping):
        for arg in typing.get_args(annotation):
            found = _inner_model(arg)
            if isinstance(found, type) and issubclass(found, BaseModel):
                return found
    return annotation


def did_you_mean(model: type[BaseModel] | None, loc: Sequence[Any]) -> str:
    """`` (did you mean 'interval'?)`` for a misspelt key, the hint flags and environment
    variables get; "" when nothing in that section is close."""
    section = _model_at(model, loc) if model is not None and loc else None
    if section is None:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(section.model_fields), n=1,
                                      cutoff=0.75)
    if not close:
        return ""
    return f" (did you mean {'.'.join([*(str(p) for p in loc[:-1]), close[0]])!r}?)"


def describe_validation_error(exc: ValidationError,
                              model: type[BaseModel] | None = None) -> str:
    """Every error of ``exc`` in one line; with ``model`` (the schema validated against),
    a misspelt key gets a "did you mean"."""
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown config key {key!r}{did_you_mean(model, err['loc'])}")
        else:
            parts.append(f"bad value for {key!r}: {message(err)}")
    return "; ".join(parts)
