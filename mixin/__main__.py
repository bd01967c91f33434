"""Generate the rules, alerts and dashboards from mixin/config.yaml.

    python -m mixin                       # rewrite alerts/*.rules.yml and dashboards/*.json
    python -m mixin --check               # fail when a committed file differs
    python -m mixin --config my.yaml --out build/   # your overrides, written elsewhere
    python -m mixin --shards 2 --out build/          # vmalert/shard-<i>.rules.yml, global
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mixin.config import load
from mixin.render import ROOT, render
from mixin.shards import shard_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="fail if a generated file differs from the one in --out")
    parser.add_argument("--config", type=Path, action="append", default=[],
                        help="YAML deep-merged over mixin/config.yaml (repeatable)")
    parser.add_argument("--out", type=Path, default=ROOT,
                        help="root to write alerts/ and dashboards/ under (default: the repo)")
    parser.add_argument("--shards", type=int, default=0,
                        help="write vmalert/shard-<i>.rules.yml for N scraping shards and "
                             "vmalert/global.rules.yml instead (docs/scaling.md)")
    parser.add_argument("--shard-label", default="shard",
                        help="the label each vmagent member adds (-remoteWrite.label)")
    args = parser.parse_args(argv)
    cfg = load(*args.config)
    files = shard_files(cfg, args.shards, args.shard_label) if args.shards else render(cfg)
    stale = []
    for rel, text in files.items():
        path = args.out / rel
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"out of date: {', '.join(stale)}; run `python -m mixin` (make mixin)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
