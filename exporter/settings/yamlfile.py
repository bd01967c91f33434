"""Bounded YAML: whatever a config file holds, reading it is one line of error or a value.

``yaml.safe_load`` raises more than ``YAMLError`` (deep nesting: ``RecursionError``; an
impossible date or a 5,000-digit int: ``ValueError``), and a few KB of aliases can expand
into billions of nodes that validation then walks for minutes. :func:`parse` bounds the
text's size, the nesting depth and the size of the document with every alias expanded,
and turns every failure into :class:`YamlError` with a one-line message. A leaf module
(no exporter imports) so config, web config and reload share it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from exporter.settings.section import MAX_SETTING_CHARS

MAX_BYTES = 1024 * 1024
"""A config file longer than this is refused (the chart's is about 2 KB)."""
MAX_DEPTH = 32
"""Nesting deeper than this is refused (the schema nests 4 levels)."""
MAX_NODES = 100_000
"""Scalars, sequences and mappings with every alias expanded: more is refused."""


class YamlError(ValueError):
    """A YAML text that cannot be used; the message is one line."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that stops composing past :data:`MAX_DEPTH` (before Python's recursion
    limit would)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlError(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def parse(text: str) -> Any:
    """The YAML value of ``text``, or :class:`YamlError` saying why not in one line."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlError(f"larger than {MAX_BYTES} bytes")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node)
        return loader.construct_document(node)
    except YamlError:
        raise
    except yaml.YAMLError as exc:
        raise YamlError(describe(exc)) from exc
    except (ValueError, OverflowError, TypeError, RecursionError) as exc:
        raise YamlError(f"not valid YAML: {' '.join(str(exc).split())[:200]}") from exc
    finally:
        loader.dispose()


def _check_size(root: yaml.Node) -> None:
    """Refuse a document of more than :data:`MAX_NODES` nodes with aliases expanded
    (each distinct node is sized once, so this is linear in the text)."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # post-order without recursion: children are sized before parents
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if not children_done:
            if id(node) in open_:
                raise YamlError("an alias refers to a node that contains it")
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
            continue
        open_.discard(id(node))
        total = 1 + sum(sizes.get(id(c), 0) for c in _children(node))
        if total > MAX_NODES:
            raise YamlError(f"more than {MAX_NODES} values once aliases are expanded")
        sizes[id(node)] = total


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def describe(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line report as one line: the problem and where it is."""
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"not valid YAML: {problem}{where}"


def read_text(path: str | Path, what: str) -> str:
    """A file's UTF-8 text; ``what`` names it in the ValueError a bad file gives."""
    if len(str(path)) > MAX_SETTING_CHARS:
        raise ValueError(f"{what} path {str(path)[:64]!r}... is longer than {MAX_SETTING_CHARS}")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{what} {path}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_BYTES:
        raise ValueError(f"{what} {path}: larger than {MAX_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{what} {path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from exc
