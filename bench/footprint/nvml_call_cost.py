"""Cost of each NVML/GPM call the exporter makes, on a real GPU: wall and CPU time.

CPU time (thread_time) is what the "<1% of a core per GPU" budget is about; wall time shows
calls that wait on the driver without burning CPU. Run on the GPU machine:
    python3 -m bench.footprint.nvml_call_cost --out $OUT/nvml_call_cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import pynvml as n

REPEAT = 50


def measure(fn: Callable[[], Any]) -> dict[str, float | str]:
    walls, cpus = [], []
    try:
        for _ in range(REPEAT):
            w, c = time.perf_counter(), time.thread_time()
            fn()
            cpus.append(time.thread_time() - c)
            walls.append(time.perf_counter() - w)
    except n.NVMLError as exc:
        return {"error": str(exc)}
    return {
        "wall_ms_median": statistics.median(walls) * 1e3,
        "cpu_ms_median": statistics.median(cpus) * 1e3,
        "cpu_ms_mean": statistics.fmean(cpus) * 1e3,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    s1, s2 = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
    n.nvmlGpmSampleGet(h, s1)
    time.sleep(0.2)
    n.nvmlGpmSampleGet(h, s2)

    def gpm_metrics() -> None:
        m = n.c_nvmlGpmMetricsGet_t()
        m.version, m.numMetrics = n.NVML_GPM_METRICS_GET_VERSION, 17
        m.sample1, m.sample2 = s1, s2
        for i, mid in enumerate((1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 21, 60, 61)):
            m.metrics[i].metricId = mid
        n.nvmlGpmMetricsGet(m)

    calls: dict[str, Callable[[], Any]] = {
        "utilization": lambda: n.nvmlDeviceGetUtilizationRates(h),
        "memory": lambda: n.nvmlDeviceGetMemoryInfo(h),
        "power": lambda: n.nvmlDeviceGetPowerUsage(h),
        "power_limit": lambda: n.nvmlDeviceGetEnforcedPowerLimit(h),
        "energy": lambda: n.nvmlDeviceGetTotalEnergyConsumption(h),
        "temperature": lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
        "clock_sm": lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
        "clock_events": lambda: n.nvmlDeviceGetCurrentClocksEventReasons(h),
        "clock_event_time_fields": lambda: n.nvmlDeviceGetFieldValues(h, [74, 76, 269, 270, 271]),
        "ecc": lambda: n.nvmlDeviceGetTotalEccErrors(
            h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC),
        "remapped_rows": lambda: n.nvmlDeviceGetRemappedRows(h),
        "processes": lambda: n.nvmlDeviceGetComputeRunningProcesses(h),
        "gpm_sample_get": lambda: n.nvmlGpmSampleGet(h, s2),
        "gpm_metrics_get_17": gpm_metrics,
    }
    results = {name: measure(fn) for name, fn in calls.items()}
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    for name, r in results.items():
        print(f"{name:26s} {r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
