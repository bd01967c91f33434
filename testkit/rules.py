"""The order a backfill must evaluate recording rules in: ``promtool tsdb create-blocks-from
rules`` cannot see rules it backfills in the same run, so each pass reads only earlier ones.
Used by tests/support/backfill.py and bench/fleet/stack.py."""

from __future__ import annotations

import re
from typing import Any

RECORD_REF = re.compile(r"goodput:[a-z0-9_:]+")


def levels(rules: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``rules`` in passes, each reading only rules of earlier passes (or stored series):
    the order a backfill must evaluate them in."""
    names = {r["record"] for r in rules}
    level: dict[str, int] = {}
    while len(level) < len(rules):
        progressed = False
        for r in rules:
            # A rule may read its own last value (goodput:exporter_node:info): not a cycle.
            deps = set(RECORD_REF.findall(r["expr"])) & names - {r["record"]}
            if r["record"] not in level and deps <= level.keys():
                level[r["record"]] = 1 + max((level[d] for d in deps), default=-1)
                progressed = True
        if not progressed:
            raise ValueError("recording rules depend on each other in a cycle")
    out: list[list[dict[str, Any]]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for r in rules:
        out[level[r["record"]]].append(r)
    return out
