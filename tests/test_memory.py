"""The malloc tuning gives a big serving body's memory back ([hardening] soak: RSS stepped
up 43 MB on the first 5 MB body and never came down).

Each case runs in its own interpreter: mallopt() settings are process-wide.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")

SCRIPT = """
import gc, json, sys
from exporter.process.memory import tune_malloc
from exporter.sources.serving.exposition import ExpositionError, parse

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

applied = tune_malloc() if sys.argv[1] == "tuned" else {}
base = rss_mib()
body = ("# " + "x" * 5_000_000).encode()  # what the soak's engine sent: one 5 MB line
text = body.decode()
try:
    parse(text)
except ExpositionError:
    pass
del body, text
gc.collect()
print(json.dumps({"applied": applied, "grown_mib": rss_mib() - base}))
"""


def run(mode: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                         check=True, env={"PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_big_body_memory_goes_back_to_the_kernel() -> None:
    tuned = run("tuned")
    assert tuned["applied"] == {"arena_max": True, "mmap_threshold": True}
    assert float(tuned["grown_mib"]) < 2.0  # type: ignore[arg-type]


def test_without_the_tuning_the_body_stays_resident() -> None:
    """The control: glibc's dynamic threshold keeps the freed pages, which is the bug."""
    assert float(run("default")["grown_mib"]) > 8.0  # type: ignore[arg-type]
