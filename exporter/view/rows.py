"""The one row model behind ``top`` and the landing page.

Both read the same thing a scraper reads, the ``/metrics`` text, through prometheus_client's
parser: ``top`` from a daemon over HTTP, the landing page from its own exposition cache. So
the two views can never disagree with each other or with Prometheus, and neither reaches
into the daemon's internals. Counters become per-second rates against an earlier sample
kept by :class:`Rates`.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from prometheus_client.parser import text_string_to_metric_families

REGIME_WHY: Mapping[str, str] = {
    "idle": "nothing allocated",
    "allocated_idle": "memory held, no kernels",
    "host_bound": "waits on the CPU",
    "launch_bound": "tiny kernels",
    "comm_wait": "waits on a peer",
    "transfer_bound": "busy copying over the bus",
    "memory_bound": "DRAM bandwidth",
    "compute_bound": "tensor/SM busy",
    "unknown": "not enough data yet",
}
"""A few words per regime, for a GPU with nothing more pressing to say (docs/efficiency.md)."""

FLAG_WHY: Mapping[str, str] = {
    "hollow_busy": "hollow busy: SMs empty",
    "busy_no_output": "busy, no tokens out",
}
THROTTLED_AT = 0.1
"""Seconds of clock events per second above which a GPU reads as throttled."""


@dataclass(frozen=True)
class GpuRow:
    """What the views show of one GPU. ``None`` is "not read", never zero."""

    gpu: str
    name: str = ""
    up: bool = True
    down_reason: str = ""
    regime: str = ""
    flags: tuple[str, ...] = ()
    """busy_unproductive reasons (hollow_busy, busy_no_output)."""
    utilization: float | None = None
    sm: float | None = None
    tensor: float | None = None
    dram: float | None = None
    bus_bytes_per_second: float | None = None
    """Busiest direction of PCIe and NVLink together."""
    bus: float | None = None
    """``bus_bytes_per_second`` over the link's peak, where the peak is known."""
    power_watts: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    tokens_per_second: float | None = None
    joules_per_token: float | None = None
    job: str = ""
    job_source: str = ""
    straggler: bool = False
    profiling_reason: str = ""
    """Why profiling counters are not read here; empty while they are."""
    profiling_stale: bool = False
    throttle: str = ""
    """The clock-event reason holding the clocks down, if any."""

    @property
    def why(self) -> str:
        """The most pressing reason first, else a few words for the regime."""
        return "; ".join(self.reasons()) or REGIME_WHY.get(self.regime, "")

    def reasons(self) -> list[str]:
        """Everything unusual about this GPU, most pressing first."""
        out = [] if self.up else [f"down: {self.down_reason or 'unknown'}"]
        out += [FLAG_WHY.get(f, f) for f in self.flags]
        if self.straggler:
            out.append("straggler: its job waits on it")
        if self.throttle:
            out.append(f"throttled: {self.throttle}")
        if self.profiling_reason:
            out.append(f"no profiling: {self.profiling_reason}")
        elif self.profiling_stale:
            out.append("profiling stale")
        return out

    def text(self) -> str:
        """Everything a filter can match."""
        return " ".join((self.gpu, self.name, self.regime, self.job, self.why)).lower()


@dataclass(frozen=True)
class NodeView:
    """One node's rows and what is known of the daemon that served them."""

    node: str = ""
    version: str = ""
    backend: str = ""
    rows: tuple[GpuRow, ...] = ()
    error: str = ""
    """Why no rows could be read (unreachable daemon, bad answer)."""


@dataclass
class Rates:
    """Per-second rates of counters against a sample at least ``min_seconds`` older, so two
    requests a millisecond apart do not divide by almost nothing."""

    min_seconds: float = 0.9
    _base: tuple[float, dict[tuple[str, ...], float]] | None = None
    _last: dict[tuple[str, ...], float] = field(default_factory=dict)

    def update(self, now: float, counters: Mapping[tuple[str, ...], float]) -> dict[
        tuple[str, ...], float
    ]:
        if self._base is None:
            self._base = (now, dict(counters))
            return {}
        then, old = self._base
        if now - then >= self.min_seconds:
            self._last = {
                key: max(value - old[key], 0.0) / (now - then)
                for key, value in counters.items()
                if key in old
            }
            self._base = (now, dict(counters))
        return dict(self._last)


COUNTERS = {
    "goodput_gpu_tokens_total": "tokens",
    "goodput_gpu_pcie_bytes_total": "bus",
    "goodput_gpu_nvlink_bytes_total": "bus",
    "goodput_gpu_clock_event_seconds_total": "throttle",
}


def parse(text: str, rates: Rates | None = None, now: float | None = None) -> NodeView:
    """Rows from exposition text; ``rates`` (kept between calls) turns counters into rates."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[s.name].append((s.labels, s.value))
    per_gpu: dict[str, dict[str, object]] = defaultdict(dict)
    _gauges(samples, per_gpu)
    _flags(samples, per_gpu)
    _jobs(samples, per_gpu)
    counters: dict[tuple[str, ...], float] = {
        (COUNTERS[name], labels.get("gpu", ""),
         labels.get("direction", "") or labels.get("reason", ""), name, _extra(labels)): value
        for name in COUNTERS
        for labels, value in samples.get(name, [])
        if name != "goodput_gpu_tokens_total" or labels.get("kind") == "generation"
    }
    per_second = (rates or Rates()).update(time.monotonic() if now is None else now, counters)
    _rates(per_second, samples, per_gpu)
    build = next(iter(samples.get("goodput_exporter_build_info", [])), ({}, 0.0))[0]
    rows = tuple(
        GpuRow(gpu=gpu, **fields)  # type: ignore[arg-type]
        for gpu, fields in sorted(per_gpu.items(), key=lambda kv: gpu_key(kv[0]))
    )
    return NodeView(build.get("node", ""), build.get("version", ""), build.get("backend", ""),
                    rows)


GAUGES = {
    "goodput_gpu_utilization_ratio": "utilization",
    "goodput_gpu_sm_active_ratio": "sm",
    "goodput_gpu_tensor_active_ratio": "tensor",
    "goodput_gpu_dram_active_ratio": "dram",
    "goodput_gpu_power_watts": "power_watts",
    "goodput_gpu_memory_used_bytes": "memory_used_bytes",
    "goodput_gpu_memory_total_bytes": "memory_total_bytes",
    "goodput_gpu_joules_per_token": "joules_per_token",
}


def _gauges(samples: Mapping[str, list[tuple[dict[str, str], float]]],
            per_gpu: dict[str, dict[str, object]]) -> None:
    for labels, _ in samples.get("goodput_gpu_info", []):
        per_gpu[labels["gpu"]]["name"] = labels.get("name", "")
    for labels, value in samples.get("goodput_gpu_up", []):
        per_gpu[labels["gpu"]].update(up=value == 1, down_reason=labels.get("reason", ""))
    for name, key in GAUGES.items():
        for labels, value in samples.get(name, []):
            if "gpu" in labels and math.isfinite(value):
                per_gpu[labels["gpu"]][key] = value
    for labels, value in samples.get("goodput_gpu_regime", []):
        if value == 1:
            per_gpu[labels["gpu"]]["regime"] = labels.get("regime", "")


def _flags(samples: Mapping[str, list[tuple[dict[str, str], float]]],
           per_gpu: dict[str, dict[str, object]]) -> None:
    flags: dict[str, list[str]] = defaultdict(list)
    for labels, value in samples.get("goodput_gpu_busy_unproductive", []):
        if value == 1:
            flags[labels["gpu"]].append(labels.get("reason", ""))
    for gpu, reasons in flags.items():
        per_gpu[gpu]["flags"] = tuple(sorted(reasons))
    profiling: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for labels, value in samples.get("goodput_gpu_profiling_available", []):
        profiling[labels["gpu"]].append((value, labels.get("reason", "")))
    for gpu, found in profiling.items():
        if not any(v == 1 for v, _ in found):
            per_gpu[gpu]["profiling_reason"] = next((r for _, r in found if r), "unavailable")
    for labels, value in samples.get("goodput_gpu_profiling_stale", []):
        if value == 1:
            per_gpu[labels["gpu"]]["profiling_stale"] = True
    for labels, value in samples.get("goodput_gpu_clock_event_active", []):
        if value == 1:
            per_gpu[labels["gpu"]]["throttle"] = labels.get("reason", "")


def _jobs(samples: Mapping[str, list[tuple[dict[str, str], float]]],
          per_gpu: dict[str, dict[str, object]]) -> None:
    """The job from goodput_gpu_job_info, else the pods from goodput_gpu_pod_info."""
    jobs: dict[str, dict[str, str]] = defaultdict(dict)
    for labels, _ in samples.get("goodput_gpu_job_info", []):
        name = "/".join(p for p in (labels.get("namespace", ""), labels.get("job_id", "")) if p)
        jobs[labels["gpu"]].setdefault(name, labels.get("job_source", ""))
    pods: dict[str, dict[str, str]] = defaultdict(dict)
    for labels, _ in samples.get("goodput_gpu_pod_info", []):
        name = "/".join(p for p in (labels.get("namespace", ""), labels.get("pod", "")) if p)
        pods[labels["gpu"]].setdefault(name, "kubernetes")
    for gpu in set(jobs) | set(pods):
        found = jobs.get(gpu) or pods[gpu]
        per_gpu[gpu].update(job=",".join(n for n in found if n),
                            job_source=next(iter(found.values()), ""))
    for labels, value in samples.get("goodput_job_straggler", []):
        if value == 1 and labels.get("gpu"):
            per_gpu[labels["gpu"]]["straggler"] = True


def _extra(labels: Mapping[str, str]) -> str:
    """The labels that tell apart two series of one family on one GPU (tokens by model)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("gpu", "node"))


def _rates(per_second: Mapping[tuple[str, ...], float],
           samples: Mapping[str, list[tuple[dict[str, str], float]]],
           per_gpu: dict[str, dict[str, object]]) -> None:
    tokens: dict[str, float] = defaultdict(float)
    bus: dict[tuple[str, str], float] = defaultdict(float)
    for (kind, gpu, detail, *_), value in per_second.items():
        if kind == "tokens":
            tokens[gpu] += value
        elif kind == "bus":
            bus[(gpu, detail)] += value
        elif kind == "throttle" and value >= THROTTLED_AT and gpu in per_gpu:
            per_gpu[gpu].setdefault("throttle", detail)
    for gpu, value in tokens.items():
        if gpu in per_gpu:
            per_gpu[gpu]["tokens_per_second"] = value
    peaks: dict[str, float] = defaultdict(float)
    for labels, value in samples.get("goodput_gpu_link_peak_bytes_per_second", []):
        peaks[labels["gpu"]] += value
    for (gpu, _), value in sorted(bus.items(), key=lambda kv: kv[1]):
        if gpu in per_gpu:  # sorted ascending: the busiest direction is written last
            per_gpu[gpu]["bus_bytes_per_second"] = value
            if peaks.get(gpu):
                per_gpu[gpu]["bus"] = min(value / peaks[gpu], 1.0)


def gpu_key(gpu: str) -> tuple[int, ...]:
    """GPUs in numeric order (2 before 10; MIG ``0-1`` after ``0``)."""
    return tuple(int(p) if p.isdigit() else -1 for p in gpu.split("-"))


SORTS: Mapping[str, tuple[str, bool]] = {
    "gpu": ("gpu", False),
    "regime": ("regime", False),
    "sm": ("sm", True),
    "tensor": ("tensor", True),
    "dram": ("dram", True),
    "power": ("power_watts", True),
    "tokens": ("tokens_per_second", True),
    "job": ("job", False),
}
"""Sort keys a person can pick, each with its natural direction (numbers biggest first)."""


def arrange(rows: Iterable[GpuRow], sort: str = "gpu", filter_text: str = "",
            reverse: bool = False) -> list[GpuRow]:
    """Rows matching ``filter_text`` (every word, anywhere in the row), sorted by ``sort``."""
    words = filter_text.lower().split()
    kept = [r for r in rows if all(w in r.text() for w in words)]
    attr, descending = SORTS.get(sort, SORTS["gpu"])

    def key(row: GpuRow) -> tuple[object, ...]:
        value = getattr(row, attr)
        if attr == "gpu":
            return (0, gpu_key(value))
        if isinstance(value, str):
            return (value == "", value, gpu_key(row.gpu))
        missing = value is None
        return (missing, -(value or 0.0) if descending else (value or 0.0), gpu_key(row.gpu))

    kept.sort(key=key)
    return kept[::-1] if reverse else kept


def with_error(view: NodeView, error: str) -> NodeView:
    return replace(view, error=error)
