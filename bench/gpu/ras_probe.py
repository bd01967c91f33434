"""Probe NCCL's RAS endpoint on a GPU machine: jobs side by side (two 2-rank jobs on GPUs
0,1 and 2,3, or two 1-rank jobs on one GPU) launch all-reduces and count them; the
exporter's NCCL source and a running daemon read NCCL's own count. Writes
``ras-probe.json`` (the ranks' counts, the source's readings, the daemon's counter) and
``ras-status.json`` (one raw RAS document) under ``--out``.

``python3 -m bench.gpu.ras_probe --out DIR [--seconds 12] [--metrics URL]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any


def rank_main(rank: int, world: int, port: int, gpus: list[int], seconds: float,
              kib: int, report: str) -> None:
    """One rank: all-reduces of ``kib`` KiB back to back with a 2-float flag every 8, counted."""
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(gpus[rank])
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            device_id=torch.device("cuda", gpus[rank]))
    buf = torch.ones(kib * 256, device="cuda")
    flag = torch.zeros(2, device="cuda")
    dist.all_reduce(flag)
    torch.cuda.synchronize()
    lines: list[tuple[float, int]] = []
    count, start = 1, time.time()
    while True:
        for _ in range(8):
            dist.all_reduce(buf)
        dist.all_reduce(flag)
        count += 9
        flag[0] = 1.0 if time.time() - start > seconds else 0.0
        stop = flag.tolist()[0] > 0
        now = time.time()
        if not lines or now - lines[-1][0] >= 0.5:
            lines.append((now, count))
        if stop:
            break
    lines.append((time.time(), count))
    Path(report).write_text(json.dumps({"rank": rank, "gpu": gpus[rank], "pid": os.getpid(),
                                        "counts": lines}))
    dist.destroy_process_group()


def job(port: int, gpus: list[int], seconds: float, kib: int, out: Path) -> list[Any]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    procs = []
    for r in range(len(gpus)):
        p = ctx.Process(target=rank_main, args=(r, len(gpus), port, gpus, seconds, kib,
                                                str(out / f"rank-{gpus[r]}.json")))
        p.start()
        procs.append(p)
    return procs


async def watch(seconds: float, metrics: str, out: Path) -> list[dict[str, Any]]:
    import pynvml

    from exporter.readings import CollectiveReading, ProcessInfo
    from exporter.sources.nccl import ras
    from exporter.sources.nccl.config import NcclConfig
    from exporter.sources.nccl.source import NcclSource

    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def processes() -> tuple[ProcessInfo, ...]:
        return tuple(ProcessInfo(str(i), p.pid) for i, h in enumerate(handles)
                     for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h))

    src = NcclSource(NcclConfig(interval=1.0, connections=4), processes)
    samples: list[dict[str, Any]] = []
    raw_saved = False
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        result = await src.poll()
        reading = result.get(CollectiveReading)
        sample: dict[str, Any] = {
            "t": time.time(), "poll_s": round(time.monotonic() - t0, 4), "ok": result.ok,
            "error": result.error, "errors": dict(result.errors),
            "answered": reading.answered if reading else None,
            "communicators": reading.communicators if reading else None,
            "gpus": {g: [s.total, s.per_second]
                     for g, s in (reading.gpus if reading else {}).items()},
        }
        if metrics:
            try:
                text = urllib.request.urlopen(metrics, timeout=2).read().decode()
                sample["metrics"] = [ln for ln in text.splitlines()
                                     if ln.startswith(("goodput_gpu_collectives_total",
                                                       "goodput_nccl_"))]
            except OSError as exc:
                sample["metrics_error"] = str(exc)
        if not raw_saved and reading is not None and reading.answered:
            try:
                body = await ras._exchange("localhost", 28028, 8 << 20)
                (out / "ras-status.json").write_bytes(body)
                raw_saved = True
            except ras.RasError as exc:
                sample["raw_error"] = str(exc)
        samples.append(sample)
        print(json.dumps({k: sample[k] for k in ("t", "poll_s", "ok", "answered", "gpus")}),
              flush=True)
        await asyncio.sleep(max(1.0 - (time.monotonic() - t0), 0.0))
    return samples


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--kib", type=int, default=256)
    ap.add_argument("--metrics", default="")
    ap.add_argument("--jobs", default="0,1 2,3",
                    help="GPUs of each job: '0,1 2,3' (two 2-rank jobs); '0 0' (two 1-rank "
                         "jobs on one GPU)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ras-probe-"))
    for n in range(len(args.jobs.split())):
        (work / f"job{n}").mkdir(exist_ok=True)
    jobs = []
    for n, spec in enumerate(args.jobs.split()):
        gpus = [int(g) for g in spec.split(",")]
        jobs += job(29511 + n, gpus, args.seconds, args.kib, work / f"job{n}")
    samples = asyncio.run(watch(args.seconds + 12.0, args.metrics, args.out))
    for p in jobs:
        p.join(timeout=30)
    ranks = [json.loads(f.read_text()) for f in sorted(work.glob("job*/rank-*.json"))]
    (args.out / "ras-probe.json").write_text(json.dumps({"ranks": ranks, "samples": samples},
                                                        indent=1))
    sys.exit(0 if ranks else 1)


if __name__ == "__main__":
    main()
