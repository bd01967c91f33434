"""``python3 -m bench.gpu.workloads NAME [opts]``: run one workload, speaking the protocol.

Lines on stdout: ``ready`` (the steady loop begins), family events (``phase``, ``steady``,
``phase_done``, ``rank_stats``), then ``done`` with the stats, or ``error`` (exit 1; 2 for
arguments the workload cannot use). SIGTERM or SIGINT stop it cleanly.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from typing import Any

from bench.gpu.workloads.core import DEVICE_ORDER, NO_MULTICAST, BadArgs, Stop, emit


def main(argv: list[str] | None = None) -> int:
    # before any torch import, so NCCL ranks and child workloads inherit them
    os.environ.update(NO_MULTICAST)
    for key, value in DEVICE_ORDER.items():
        os.environ.setdefault(key, value)
    from bench.gpu.workloads.registry import REGISTRY, parser

    args = parser().parse_args(argv)
    workload = REGISTRY[args.name]
    stop = Stop(getattr(args, "seconds", math.inf))

    def _stop(*_: Any) -> None:
        stop.event.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    started = time.monotonic()
    try:
        stats = (workload.family.dry_run if args.dry_run else workload.run)(stop, args)
    except BadArgs as exc:
        emit("error", error=str(exc))
        return 2
    except Exception as exc:
        emit("error", error=f"{type(exc).__name__}: {exc}")
        return 1
    extra = {"wall_seconds": time.monotonic() - started} if workload.family.wall_seconds else {}
    emit("done", stats=stats, **extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
