"""Generate docs/settings.md from the settings schema: ``python -m exporter.docgen.settings
[--check]``.

Every key, its flag, its environment variable, default and help come from the same place
the daemon reads them: ``CoreSettings`` and each collector's section class and
``Collector.flags``. CI runs ``--check`` (``make test``), so the reference cannot drift
from the code.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from exporter.collectors import REGISTRY
from exporter.wiring.config import ENV_PREFIX, Settings

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "docs" / "settings.md"

HEADER = """# Settings reference

Generated from the code by `.venv/bin/python -m exporter.docgen.settings`; do not edit by hand
(CI checks that this file matches the code). README.md "Configuration" says how the layers
combine: flags win over the environment, which wins over the `--config` YAML file. Each collector's
section is named, with its flags, in its module (`exporter/collectors/<name>.py`), and declared
next to the code that reads it (`exporter/sources/<package>/config.py`, `exporter/model/config.py`).

"""


def _flags() -> dict[str, str]:
    """Settings key -> its flag spelling (with metavar)."""
    from exporter.cli import FLAGS

    out = {f.key: f.flag + (f" {f.metavar}" if f.metavar else "") for f in FLAGS}
    for c in REGISTRY:
        for f in c.flags:
            out[f"{c.section}.{f.key}"] = f.flag + (f" {f.metavar}" if f.metavar else "")
    return out


def _type(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return " \\| ".join(str(a) for a in get_args(annotation))
    text = getattr(annotation, "__name__", None) if get_origin(annotation) is None else None
    text = text or str(annotation)
    return re.sub(r"\b(?:[a-z_]+\.)+([A-Za-z_]+)", r"\1", text).replace("|", "\\|")


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        return f"`{value}`" if isinstance(value, (list, dict, tuple)) else "computed"
    value = info.default
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "-"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`" if value not in ("", None) else "-"


def _rows(model: type[BaseModel], prefix: str, flags: dict[str, str]) -> Iterator[str]:
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield f"\n## `{key}`\n\n{_text(kind.__doc__ or '')}\n"
            yield "| key | flag | environment | type | default | meaning |"
            yield "|---|---|---|---|---|---|"
            yield from _rows(kind, f"{key}.", flags)
            continue
        env = ENV_PREFIX + key.upper().replace(".", "__")
        flag = f"`{flags[key]}`" if key in flags else "-"
        yield (f"| `{key}` | {flag} | `{env}` | {_type(kind)} | {_default(info)} "
               f"| {_text(info.description or '')} |")


def _text(text: str) -> str:
    return " ".join(text.replace("``", "`").split()).replace("|", "\\|")


def render() -> str:
    flags = _flags()
    lines = ["## Daemon", "", "| key | flag | environment | type | default | meaning |",
             "|---|---|---|---|---|---|"]
    lines += list(_rows(Settings, "", flags))
    return HEADER + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from exporter.docgen.metrics import generated_doc_main

    return generated_doc_main(render, DEFAULT_PATH, "exporter.docgen.settings", argv)


if __name__ == "__main__":
    raise SystemExit(main())
