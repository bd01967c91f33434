"""Run the daemon under tracemalloc and write where Python memory grew ([hardening] soak).

    python -m bench.soak.traced_daemon OUT.jsonl -m exporter --simulate ...

After ``--warmup`` seconds it takes a baseline snapshot; every ``--every`` seconds after
that it appends one JSON line to OUT: the traced total and the 15 source lines whose
allocations grew most since the baseline. Frames are 6 deep, so a line names who called the
allocator, not only the allocator. Bench only: tracing slows the daemon several-fold.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import time
import tracemalloc

WARMUP = float(os.environ.get("TRACE_WARMUP", "120"))
EVERY = float(os.environ.get("TRACE_EVERY", "60"))
FRAMES = 6
FILTERS = (tracemalloc.Filter(False, tracemalloc.__file__),
           tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"))


def _watch(out: str) -> None:
    time.sleep(WARMUP)
    base = tracemalloc.take_snapshot().filter_traces(FILTERS)
    started = time.monotonic()
    while True:
        time.sleep(EVERY)
        snap = tracemalloc.take_snapshot().filter_traces(FILTERS)
        top = snap.compare_to(base, "traceback")[:15]
        line = {
            "minutes_since_baseline": round((time.monotonic() - started) / 60, 1),
            "traced_mib": round(tracemalloc.get_traced_memory()[0] / 2**20, 3),
            "top": [{"size_diff_kib": round(s.size_diff / 1024, 1), "count_diff": s.count_diff,
                     "where": [f"{f.filename}:{f.lineno}" for f in s.traceback]}
                    for s in top],
        }
        with open(out, "a") as fh:
            fh.write(json.dumps(line) + "\n")


def main() -> None:
    out, flag, module, *rest = sys.argv[1:]
    if flag != "-m":
        raise SystemExit("usage: traced_daemon.py OUT.jsonl -m MODULE [ARGS...]")
    tracemalloc.start(FRAMES)
    threading.Thread(target=_watch, args=(out,), daemon=True, name="tracemalloc").start()
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
