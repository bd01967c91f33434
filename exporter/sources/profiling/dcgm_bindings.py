"""Finding DCGM's Python bindings, which ship with DCGM itself and are not on PyPI.

The bindings are plain modules (``dcgm_structs``, ``dcgm_agent``, ``dcgm_fields``,
``dcgmvalue``) that import one another by top-level name, so their directory goes on
``sys.path``. They load ``libdcgm.so.4`` themselves and must match the installed DCGM major
version, which is why we never vendor them. Also: error-code to reason mapping, shared by the
DCGM source and its tests.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

SEARCH_PATHS: tuple[str, ...] = (
    "/usr/share/datacenter-gpu-manager-4/bindings/python3",  # DCGM 4.x packages
    "/usr/local/dcgm/bindings/python3",  # DCGM 3.x packages
)
MODULES = ("dcgm_structs", "dcgm_fields", "dcgm_agent", "dcgmvalue")


class BindingsNotFound(Exception):
    """The bindings cannot be imported; the message says where we looked."""


@dataclass(frozen=True)
class DcgmBindings:
    structs: ModuleType
    fields: ModuleType
    agent: ModuleType
    value: ModuleType
    path: str


def load_bindings(extra_path: str = "", search_paths: Sequence[str] = SEARCH_PATHS) -> DcgmBindings:
    """Import the bindings from ``extra_path`` or the standard install locations."""
    candidates = [p for p in (extra_path, *search_paths) if p]
    found = next((p for p in candidates if os.path.isfile(os.path.join(p, "dcgm_agent.py"))), "")
    if not found:
        raise BindingsNotFound(
            "DCGM Python bindings not found (no dcgm_agent.py in "
            + ", ".join(candidates)
            + "); install datacenter-gpu-manager-4-core or set profiling.dcgm_bindings_path"
        )
    if found not in sys.path:
        sys.path.append(found)  # appended: the directory must not shadow other modules
    try:
        mods = {name: importlib.import_module(name) for name in MODULES}
    except Exception as exc:  # a broken install: syntax error, missing sibling module
        raise BindingsNotFound(f"DCGM Python bindings in {found} failed to import: {exc}") from exc
    return DcgmBindings(
        structs=mods["dcgm_structs"],
        fields=mods["dcgm_fields"],
        agent=mods["dcgm_agent"],
        value=mods["dcgmvalue"],
        path=found,
    )


# Reasons published in goodput_gpu_profiling_available{source="dcgm",reason=...}.
_REASONS: dict[str, str] = {
    "DCGM_ST_MODULE_NOT_LOADED": "not_loaded",
    "DCGM_ST_REQUIRES_ROOT": "no_permission",
    "DCGM_ST_NO_PERMISSION": "no_permission",
    "DCGM_ST_PROFILING_LIBRARY_ERROR": "locked",
    "DCGM_ST_PAUSED": "locked",
    "DCGM_ST_IN_USE": "locked",
    "DCGM_ST_PROFILING_MULTI_PASS": "incompatible",
    "DCGM_ST_GROUP_INCOMPATIBLE": "incompatible",
    "DCGM_ST_PROFILING_NOT_SUPPORTED": "unsupported",
    "DCGM_ST_NOT_SUPPORTED": "unsupported",
    "DCGM_ST_GPU_NOT_SUPPORTED": "unsupported",
    "DCGM_ST_FIELD_UNSUPPORTED_BY_API": "unsupported",
    "DCGM_ST_UNKNOWN_FIELD": "unsupported",
    "DCGM_ST_CONNECTION_NOT_VALID": "unreachable",
    "DCGM_ST_TIMEOUT": "unreachable",
    "DCGM_ST_LIBRARY_NOT_FOUND": "not_installed",
    "DCGM_ST_NO_DATA": "no_data",
    "DCGM_ST_NOT_WATCHED": "no_data",
    "DCGM_ST_STALE_DATA": "no_data",
    "DCGM_ST_GPU_IS_LOST": "gpu_lost",
}

# Codes after which the connection is unusable and must be rebuilt.
CONNECTION_CODES = ("DCGM_ST_CONNECTION_NOT_VALID", "DCGM_ST_TIMEOUT", "DCGM_ST_UNINITIALIZED")
# Codes on which a smaller set of fields may still be watched.
SHRINK_CODES = (
    "DCGM_ST_PROFILING_MULTI_PASS",
    "DCGM_ST_GROUP_INCOMPATIBLE",
    "DCGM_ST_NOT_SUPPORTED",
    "DCGM_ST_UNKNOWN_FIELD",
    "DCGM_ST_FIELD_UNSUPPORTED_BY_API",
)


def code_name(structs: ModuleType, code: int) -> str:
    """``-33`` -> ``DCGM_ST_MODULE_NOT_LOADED`` (from the loaded bindings, so never stale)."""
    for name in dir(structs):
        if name.startswith("DCGM_ST_") and getattr(structs, name) == code:
            return name
    return f"DCGM_ST_{code}"


def codes(structs: ModuleType, names: Sequence[str]) -> frozenset[int]:
    return frozenset(getattr(structs, n) for n in names if hasattr(structs, n))


def reason_for(structs: ModuleType, code: int) -> str:
    return _REASONS.get(code_name(structs, code), "error")


def error_code(exc: BaseException) -> int | None:
    """The DCGM status of a ``DCGMError`` (its ``value``), else None."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None
