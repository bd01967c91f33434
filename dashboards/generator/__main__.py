"""Write (or with --check, verify) dashboards/json/*.json from the generator."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.generator import fleet, node, serving
from dashboards.generator.common import to_json

OUT = Path(__file__).resolve().parent.parent
BOARDS: dict[str, Callable[[], Dashboard]] = {
    "goodput-fleet.json": fleet.build,
    "goodput-node.json": node.build,
    "goodput-serving.json": serving.build,
}


def render() -> dict[str, str]:
    return {name: to_json(build()) for name, build in BOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--check", action="store_true", help="fail if the JSON is out of date")
    ns = args.parse_args(argv)
    stale = []
    for name, text in render().items():
        path = OUT / name
        if ns.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date: {', '.join(stale)}; run python -m dashboards.generator",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
