"""Go-template text (alert annotations) written as it reads, without Python's doubled braces:
the mixin's own values go in through ``${name}`` placeholders, which Go templates never use."""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def fill(text: str, **values: object) -> str:
    """``text`` with every ``${name}`` replaced by ``values[name]`` (KeyError when one is
    missing: a typo fails the generation instead of reaching an alert)."""
    return PLACEHOLDER.sub(lambda m: str(values[m[1]]), text)
