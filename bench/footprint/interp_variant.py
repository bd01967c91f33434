"""Run a module under interpreter settings given in the environment (bench A/B only).

    BENCH_SWITCH_INTERVAL=0.0005 BENCH_GC_FREEZE_AFTER=5 \
        python -m bench.footprint.interp_variant -m exporter --simulate

``BENCH_SWITCH_INTERVAL``: ``sys.setswitchinterval`` (CPython's default is 0.005 s: a thread
that wants the GIL can wait that long behind a busy one). ``BENCH_GC_FREEZE_AFTER``: call
``gc.freeze()`` that many seconds after start, moving everything alive then out of the
collector's reach, so later full collections walk only what was allocated since.
"""

from __future__ import annotations

import gc
import os
import runpy
import sys
import threading


def main() -> None:
    flag, module, *rest = sys.argv[1:]
    if flag != "-m":
        raise SystemExit("usage: interp_variant.py -m MODULE [ARGS...]")
    if interval := os.environ.get("BENCH_SWITCH_INTERVAL"):
        sys.setswitchinterval(float(interval))
    if after := os.environ.get("BENCH_GC_FREEZE_AFTER"):
        timer = threading.Timer(float(after), gc.freeze)
        timer.daemon = True
        timer.start()
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
