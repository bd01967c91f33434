"""The [lost] report (issue 42): for each row of ``bench/gpu/jobs.py``'s result, each GPU's
waited share by the ranks' own timing beside the exporter's, the exporter's time split and
how often it named a straggler. ``python -m bench.gpu.lost_report jobs.json`` prints it.

The truth is a rank's communication time beyond the transfer alone (timed after a barrier,
no rank late), as a share of wall time: whatever made it wait. A row PASSes when every GPU's
waited share is within TOLERANCE of it, every GPU's split sums to 1 within SPLIT_TOLERANCE,
and the straggler is named as the issue asks: the static straggler and the host-stalled
rank in at least 90 % of steady windows, nobody in any other row after its first 10 s.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TOLERANCE = 0.05
SPLIT_TOLERANCE = 0.02
STEADY_S = 10.0
PERSISTENT = ("straggler_10pct", "host_stall", "straggler_5x", "straggler_25pct")
"""Rows with one persistently slow rank (the workload's last)."""


def true_waited(row: Mapping[str, Any]) -> dict[str, float]:
    """Each rank's comm beyond the transfer alone (a rank whose last truth line was lost
    borrows the transfer time its peers reported: one collective size per row)."""
    truth = row.get("truth", {})
    known = [d["pure_comm"] for d in truth.values() if d.get("pure_comm") is not None]
    pure = max(known) if known else None
    out = {}
    for rank, d in truth.items():
        p = d.get("pure_comm", pure)
        out[rank] = round(max(d["comm"] - p, 0.0), 4) if p is not None else d.get("waited", 0.0)
    return out


def naming(row: Mapping[str, Any], mode: str) -> tuple[int, dict[str, int]]:
    """(steady windows, gpu -> windows it was named in), windows STEADY_S after ready."""
    raw = row["modes"][mode].get("raw", [])
    if not raw:
        return 0, {}
    start = raw[0]["t"] + STEADY_S
    steady = [w for w in raw if w["t"] >= start]
    named: dict[str, int] = {}
    for w in steady:
        for gpu in w.get("stragglers", []):
            named[gpu] = named.get(gpu, 0) + 1
    return len(steady), named


def check(name: str, row: Mapping[str, Any], mode: str) -> tuple[bool, list[str]]:
    m = row["modes"][mode]
    why = []
    for gpu, want in true_waited(row).items():
        got = m.get(gpu, {}).get("waited")
        if got is None or abs(got - want) > TOLERANCE:
            why.append(f"GPU {gpu} waited {got} vs {want}")
        split = m.get(gpu, {}).get("split") or {}
        if split and abs(sum(split.values()) - 1.0) > SPLIT_TOLERANCE:
            why.append(f"GPU {gpu} split sums to {sum(split.values()):.3f}")
        if not split:
            why.append(f"GPU {gpu} no split")
    windows, named = naming(row, mode)
    slow = str(row.get("info", {}).get("straggler_rank"))
    if name in PERSISTENT:
        share = named.get(slow, 0) / max(windows, 1)
        if share < 0.9:
            why.append(f"straggler {slow} named in {share:.0%} of steady windows")
        if set(named) - {slow}:
            why.append(f"named {sorted(set(named) - {slow})} (false)")
    elif named:
        why.append(f"named {named} after {STEADY_S:.0f} s (false)")
    return not why, why


def render(result: Mapping[str, Any]) -> str:
    lines = ["| row | launcher | identity | GPU | truth: waited | exporter: waited | exporter: "
             "working / transferring / waiting / host_stalled / idle (sum) | straggler named "
             "(steady windows) | check |", "|---|---|---|---|---|---|---|---|---|"]
    for name, row in result["rows"].items():
        if "error" in row:
            lines.append(f"| {name} | | | | error: {row['error']} | | | | FAIL |")
            continue
        launcher = " ".join(row.get("command", [])[:1]).rsplit("/", 1)[-1] or "-"
        rdzv = "--rdzv-id" if "--rdzv-backend" in row.get("command", []) else ""
        truth = true_waited(row)
        for mode, m in row["modes"].items():
            ok, why = check(name, row, mode)
            windows, named = naming(row, mode)
            said = ", ".join(f"GPU {g} {n / max(windows, 1):.0%}" for g, n in sorted(named.items()))
            ident = ", ".join(sorted(set(m.get("job_info", {}).values()))) or "-"
            for i, gpu in enumerate(sorted(truth)):
                split = m.get(gpu, {}).get("split") or {}
                parts = " / ".join(f"{split.get(p, 0):.2f}" for p in (
                    "working", "transferring", "waiting", "host_stalled", "idle"))
                total = f" ({sum(split.values()):.2f})" if split else "-"
                waited = m.get(gpu, {}).get("waited")
                first = i == 0
                lines.append(
                    f"| {name if first else ''} | {f'{launcher} {rdzv}'.strip() if first else ''} "
                    f"| {ident if first else ''} | {gpu} | {truth[gpu]:.3f} | "
                    f"{'-' if waited is None else f'{waited:.3f}'} | "
                    f"{parts + total if split else '-'} | {(said or 'none') if first else ''} | "
                    f"{('PASS' if ok else 'FAIL: ' + '; '.join(why)) if first else ''} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    for path in args:
        print(render(json.loads(Path(path).read_text())), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
