"""The daemon with some /proc reads stuck forever, as a read of a process stuck in the
kernel (D state, holding its memory map's lock) never returns:

    python tests/support/stuck_reads.py -m exporter ARGS

(``testkit.harness.DaemonProcess(python=...)`` runs it so). Every path listed in
``$GOODPUT_TEST_STUCK_READS`` (``os.pathsep``-separated) sleeps in its read until the process
ends; every other read is the real one.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from exporter.sources.jobs import procfs

STUCK = frozenset(p for p in os.environ.get("GOODPUT_TEST_STUCK_READS", "").split(os.pathsep) if p)
_real = procfs.read_file


def read_file(path: str, cap: int) -> tuple[bytes, bool]:
    if path in STUCK:
        while True:  # never returns, and ignores everything but the end of the process
            time.sleep(3600)
    return _real(path, cap)


procfs.read_file = read_file  # type: ignore[assignment]

if __name__ == "__main__":
    from exporter.cli import main

    args = sys.argv[1:]
    if args[:2] == ["-m", "exporter"]:
        args = args[2:]
    raise SystemExit(main(args))
