"""A real Prometheus holding a deterministic half hour of the simulated node, rules included.

The simulated node is recorded in virtual time (tests/support/sim_recording.py) and
backfilled with `promtool tsdb create-blocks-from openmetrics`; the recording rules are then
backfilled with `promtool tsdb create-blocks-from rules`, one dependency level per pass,
because that command cannot see rules it is backfilling in the same run.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from testkit.rules import levels
from tests.support.prometheus import PrometheusServer, prometheus, require
from tests.support.sim_recording import record

RULES = Path(__file__).resolve().parents[2] / "alerts" / "goodput.rules.yml"


def rule_levels(path: Path = RULES) -> list[list[dict[str, Any]]]:
    """The recording rules of ``path`` grouped so each group only reads rules of earlier
    groups."""
    rules = [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]
             if "record" in r]
    return levels(rules)


def without_families(text: str, drop: Callable[[str], bool]) -> str:
    """OpenMetrics ``text`` without the families ``drop`` is true for (families are
    contiguous, each starting at its `# TYPE` line)."""
    out, keep = [], True
    for line in text.splitlines(keepends=True):
        if line.startswith("# TYPE "):
            keep = not drop(line.split()[2])
        elif line.startswith("# EOF"):
            keep = True
        if keep:
            out.append(line)
    return "".join(out)


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed: {result.stdout}{result.stderr}")


@contextmanager
def backfilled_prometheus(workdir: Path, end: float, duration: float = 1800.0,
                          drop: Callable[[str], bool] | None = None
                          ) -> Iterator[PrometheusServer]:
    """``drop`` leaves out the families it is true for: a node without some source."""
    promtool = require("promtool")
    data = workdir / "data"
    workdir.mkdir(parents=True, exist_ok=True)
    capture = workdir / "sim.om"
    text = record(end=end, duration=duration)
    capture.write_text(without_families(text, drop) if drop else text)
    _run(promtool, "tsdb", "create-blocks-from", "openmetrics", str(capture), str(data))
    start = int(end - duration)
    for i, rules in enumerate(rule_levels()):
        rule_file = workdir / f"level{i}.rules.yml"
        rule_file.write_text(yaml.safe_dump({"groups": [{"name": f"level{i}",
                                                         "interval": "1m",
                                                         "rules": rules}]}))
        blocks = workdir / f"level{i}-blocks"
        with prometheus(workdir, targets=[]) as prom:
            _run(promtool, "tsdb", "create-blocks-from", "rules", f"--start={start}",
                 f"--end={int(end)}", f"--url={prom.url}", f"--output-dir={blocks}", "-q",
                 str(rule_file))
        for block in blocks.iterdir():
            shutil.move(str(block), data / block.name)
    with prometheus(workdir, targets=[]) as prom:
        yield prom
