"""Generate docs/metrics.md from the catalog: ``python -m exporter.metrics.docs [--check]``.

CI runs ``--check`` so the reference can never drift from what ``/metrics`` serves.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from exporter.metrics.catalog import DEVICE_BASE_LABELS, load_all

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

HEADER = """# Metrics reference

Generated from the code by `python -m exporter.metrics.docs`; do not edit by hand (CI checks
that this file matches the code).

Every per-GPU family carries the labels `{base}`, plus the Kubernetes attribution labels
(`namespace`, `pod`, `container` by default) when attribution is enabled. Node-level families
carry `node`. Ratios are 0 to 1; counters are cumulative so `rate()` is exact over any range.

| family | type | unit | labels | source | description |
|---|---|---|---|---|---|
"""


def render() -> str:
    rows = []
    for spec in load_all().values():
        base = "node" if spec.scope == "node" else "per GPU"
        extra = ", ".join(f"`{label}`" for label in spec.labels) or "-"
        help_text = spec.help.replace("|", "\\|")
        rows.append(
            f"| `{spec.name}` | {spec.type} | {spec.unit or '-'} | {base}; {extra} "
            f"| {spec.source} | {help_text} |"
        )
    return HEADER.format(base="`, `".join(DEVICE_BASE_LABELS)) + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    parser.add_argument("--path", type=Path, default=DEFAULT_PATH)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.path.read_text() if args.path.exists() else ""
        if current != text:
            print(f"{args.path} is stale: run python -m exporter.metrics.docs", file=sys.stderr)
            return 1
        return 0
    args.path.parent.mkdir(parents=True, exist_ok=True)
    args.path.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
