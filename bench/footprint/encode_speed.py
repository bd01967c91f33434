"""Time one encode of the exposition for a simulated node of N GPUs (off the request path).

    python -m bench.footprint.encode_speed --gpus 64 --repeat 50

Polls every enabled source of an in-process daemon on the simulated node a few times, then
times ``Encoder.encode`` (text and OpenMetrics) and gzip on the resulting snapshot.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import statistics
import time

from exporter.sources.nvml_session import NvmlSession
from exporter.wiring.config import build as build_settings
from exporter.wiring.daemon import build


async def _snapshot(gpus: int) -> tuple[object, object]:
    settings = build_settings(
        {"simulate": True, "simulate_gpus": gpus, "node_name": "bench-node"}, environ={}
    )
    session = NvmlSession.open_for(settings)
    daemon = build(settings, session)
    for _ in range(3):
        for source in daemon.sources:
            await daemon.scheduler.poll_once(source)
    return daemon, session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    daemon, _ = asyncio.run(_snapshot(args.gpus))
    encoder = daemon.exposition._encoder  # type: ignore[attr-defined]
    snap = daemon.store.current  # type: ignore[attr-defined]
    for openmetrics in (False, True):
        times = []
        body = b""
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            body = encoder.encode(snap, openmetrics)
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        packed = gzip.compress(body, 6, mtime=0)
        gz = time.perf_counter() - t0
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        print(
            f"{'openmetrics' if openmetrics else 'text'}: gpus={args.gpus} series={series} "
            f"bytes={len(body)} gzip_bytes={len(packed)} "
            f"encode_p50={statistics.median(times) * 1e3:.2f}ms "
            f"encode_max={max(times) * 1e3:.2f}ms gzip={gz * 1e3:.2f}ms"
        )


if __name__ == "__main__":
    main()
