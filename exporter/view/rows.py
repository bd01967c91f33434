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
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from prometheus_client.parser import text_string_to_metric_families

from exporter.model import regimes
from exporter.view.holders import HolderRow, holder_rows
from exporter.view.jobs import JobRow, Split, job_rows

REGIME_WHY: Mapping[str, str] = {r.name: r.why for r in regimes.ALL}
"""A few words per regime, for a GPU with nothing more pressing to say: from the regimes'
one declaration, which the views read like the exposition does (docs/efficiency.md)."""

FLAG_WHY: Mapping[str, str] = {
    "hollow_busy": "hollow busy: SMs empty",
    "busy_no_output": "busy, no tokens out",
}
THROTTLED_AT = 0.1
"""Seconds of clock events per second above which a GPU reads as throttled."""


GIB = float(1 << 30)


def gib(value: float | None) -> str:
    """Bytes in GiB as nvidia-smi counts them (an "H100 80GB" holds 80 GiB, not 86 GB)."""
    if value is None:
        return "-"
    shown = value / GIB
    return f"{shown:.1f} GiB" if shown < 10 else f"{shown:.0f} GiB"


def memory_text(row: GpuRow) -> str:
    """``60 / 80 GiB``: used over total, one unit."""
    if row.memory_used_bytes is None:
        return "-"
    total = gib(row.memory_total_bytes).removesuffix(" GiB")
    return f"{gib(row.memory_used_bytes).removesuffix(' GiB')} / {total} GiB"


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
        if self.up and self.regime == "allocated_idle":  # the costliest waste: say it first
            out.append(f"allocated idle: {gib(self.memory_used_bytes)} held, no kernels")
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
    jobs: tuple[JobRow, ...] = ()
    """Multi-GPU jobs: their GPUs, straggler and where their time went."""
    holders: tuple[HolderRow, ...] = ()
    """Holders of shared GPUs (pods or processes), shown under their GPU."""
    error: str = ""
    """Why no rows could be read (unreachable daemon, bad answer)."""


Counters = Mapping[tuple[str, ...], float]
"""Counter values by (kind, gpu, detail, family, other labels)."""

RATE_WINDOW = 10.0
"""Rates are taken over at least this many seconds once the history is that long: the
clock-event counter moves in ~5 s steps (NVML's throttle time is read every 5th poll), so a
shorter window reads a throttled GPU as throttled in one frame and not in the next."""


@dataclass
class Rates:
    """Per-second rates of counters against an earlier sample: the newest one at least
    ``window`` seconds old, else (a view just started) the oldest one at least
    ``min_seconds`` old, so two requests a millisecond apart do not divide by almost nothing
    and a counter that moves in steps never flickers. A sample may be a function that
    parses it when first needed (the landing page keeps the daemon's bodies unparsed)."""

    min_seconds: float = 0.9
    window: float = RATE_WINDOW
    _samples: deque[tuple[float, Counters | Callable[[], Counters]]] = field(
        default_factory=deque)

    def wants(self, now: float) -> bool:
        """Whether a sample read at ``now`` would be kept (one per quarter window)."""
        return not self._samples or now - self._samples[-1][0] >= self.window / 4

    def add(self, now: float, sample: Counters | Callable[[], Counters]) -> None:
        """Keep ``sample``, at most one per quarter window, and none older than needed."""
        if not self.wants(now):
            return
        self._samples.append((now, sample))
        while len(self._samples) > 1 and now - self._samples[1][0] >= self.window:
            self._samples.popleft()

    def since(self, now: float, counters: Counters) -> dict[tuple[str, ...], float]:
        """Rates of ``counters`` (read at ``now``) against the best kept sample; {} if none.
        A series younger than that sample (profiling counters appear a window after the
        GPUs) is taken against the oldest sample that has it."""
        older = [i for i, (t, _) in enumerate(self._samples) if now - t >= self.min_seconds]
        full = [i for i in older if now - self._samples[i][0] >= self.window]
        if not older:
            return {}
        best = full[-1] if full else older[0]
        out: dict[tuple[str, ...], float] = {}
        for i in [best, *(i for i in older if i != best)]:
            then, old = self._parsed(i)
            out.update({key: max(value - old[key], 0.0) / (now - then)
                        for key, value in counters.items() if key in old and key not in out})
            if len(out) == len(counters):
                break
        return out

    def _parsed(self, i: int) -> tuple[float, Counters]:
        then, sample = self._samples[i]
        if callable(sample):
            sample = sample()
            self._samples[i] = (then, sample)
        return then, sample

    def update(self, now: float, counters: Counters) -> dict[tuple[str, ...], float]:
        """Rates of ``counters`` read at ``now``, which are then kept as a sample."""
        out = self.since(now, counters)
        self.add(now, counters)
        return out


COUNTERS = {
    "goodput_gpu_tokens_total": "tokens",
    "goodput_gpu_pcie_bytes_total": "bus",
    "goodput_gpu_nvlink_bytes_total": "bus",
    "goodput_gpu_clock_event_seconds_total": "throttle",
    "goodput_gpu_job_seconds_total": "split",
}
COUNTER_PREFIXES = tuple(name.encode() for name in COUNTERS)
"""What a line of the exposition starts with when it is one of the counters rates read."""


Samples = Mapping[str, list[tuple[dict[str, str], float]]]


def samples_of(text: str) -> Samples:
    """Every sample of exposition text by sample name (``x_total``, not the family)."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[s.name].append((s.labels, s.value))
    return samples


def _key(name: str, labels: Mapping[str, str]) -> tuple[str, ...]:
    detail = labels.get("direction", "") or labels.get("reason", "") or labels.get("part", "")
    return (COUNTERS[name], labels.get("gpu", ""), detail, name, _extra(labels))


def counters_of(samples: Samples) -> dict[tuple[str, ...], float]:
    """The counters the views take rates of, keyed so two reads line up."""
    return {
        _key(name, labels): value
        for name in COUNTERS
        for labels, value in samples.get(name, [])
        if name != "goodput_gpu_tokens_total" or labels.get("kind") == "generation"
    }


JOB_SECONDS = "goodput_gpu_job_seconds_total"


def _split(samples: Samples, per_second: Counters) -> Split:
    """Seconds per second of each job's GPUs in each part (exporter/view/jobs.py)."""
    out = {}
    for labels, _ in samples.get(JOB_SECONDS, []):
        rate = per_second.get(_key(JOB_SECONDS, labels))
        if rate is not None:
            out[(labels.get("job_source", ""), labels.get("namespace", ""),
                 labels.get("job_id", ""), labels.get("gpu", ""), labels.get("part", ""))] = rate
    return out


def counter_lines(body: bytes) -> Callable[[], Counters]:
    """A kept body's counters, parsed when first needed: only its counter lines are kept
    (a few kilobytes of a body of tens), and most kept samples are never parsed."""
    lines = b"\n".join(
        line for line in body.splitlines() if line.startswith(COUNTER_PREFIXES))
    return lambda: counters_of(samples_of(lines.decode("utf-8", "replace") + "\n"))


def parse(text: str, rates: Rates | None = None, now: float | None = None,
          keep: bool = True) -> NodeView:
    """Rows from exposition text; ``rates`` (kept between calls) turns counters into rates,
    and keeps this read as a sample unless ``keep`` is False (its samples come from
    elsewhere)."""
    samples = samples_of(text)
    per_gpu: dict[str, dict[str, object]] = defaultdict(dict)
    _gauges(samples, per_gpu)
    _flags(samples, per_gpu)
    _jobs(samples, per_gpu)
    counters = counters_of(samples)
    rates = rates or Rates()
    at = time.monotonic() if now is None else now
    per_second = rates.update(at, counters) if keep else rates.since(at, counters)
    _rates(per_second, samples, per_gpu)
    build = next(iter(samples.get("goodput_exporter_build_info", [])), ({}, 0.0))[0]
    rows = tuple(
        GpuRow(gpu=gpu, **fields)  # type: ignore[arg-type]
        for gpu, fields in sorted(per_gpu.items(), key=lambda kv: gpu_key(kv[0]))
    )
    return NodeView(build.get("node", ""), build.get("version", ""), build.get("backend", ""),
                    rows, jobs=job_rows(samples, _split(samples, per_second), gpu_key,
                                        _token_rates(rows)),
                    holders=holder_rows(samples))


def _token_rates(rows: tuple[GpuRow, ...]) -> dict[str, float]:
    """Generated tokens per second by GPU, where an engine's are attributed."""
    return {r.gpu: r.tokens_per_second for r in rows if r.tokens_per_second is not None}


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
