"""A simulated GPU fleet, for sizing the rules, alerts and dashboards on real Prometheus.

    python -m bench.fleet.generator write --nodes 1000 --hours 6 --out /tmp/fleet  # history
    python -m bench.fleet.generator serve --nodes 20        # live /metrics, one port per node

Running the real exporter pipeline (simulated NVML, NVML and GPM sources, the efficiency model,
the exporter's own Encoder) for every node costs ~45 ms per node-step on one core, days of CPU
for 1,000 nodes. So each workload the fleet uses (an *archetype*: a simulator pattern plus its
role - training rank, serving engine, notebook, none) runs once through that pipeline, and
every fleet GPU replays its archetype's series under its own node, gpu, uuid, pod, model and
job labels, shifted by its own phase. The series names and label sets are exactly what a node
publishes; only the values repeat between GPUs of one archetype. What the simulated node
cannot produce (serving tokens and queues, pod attribution, the engines' TTFT histograms) is
derived from the same readings with the formulas of tests/support/sim_recording.py.

The plan is deterministic: a workload mix, multi-node training jobs whose identity comes from
Kubernetes, Slurm or the node's process tree (goodput_gpu_job_info), balanced ones and ones with
a mild straggler (a rank doing 10 or 25 % more work per step, on another node than most of the
ranks waiting on it, which count the time they wait in goodput_gpu_job_wait_seconds_total),
serving engines (every tenth serving node runs one over two GPUs: a job with its tokens beside
its time split), and a few injected faults (hollow GPUs, allocated-idle notebooks, host-bound
engines, thermal throttling, lost GPUs). :func:`expected_alerts` says which GPU should raise
which alert, so a test can demand exactly that firing set.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import shutil
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporter import collectors
from exporter.metrics.encode import Encoder
from exporter.model.config import ModelConfig
from exporter.model.node import NodeModel
from exporter.process.logging import configure
from exporter.sim import patterns
from exporter.sim.fake_nvml import FakeGpu, FakeNvml
from exporter.sim.physics import GpuPhysics
from exporter.snapshot import SnapshotStore
from exporter.sources.nvml import NvmlSource
from exporter.sources.nvml_session import NvmlSession
from exporter.sources.profiling.gpm import GpmSource
from exporter.wiring.config import Settings

REPO = Path(__file__).resolve().parents[2]

STEP = 15.0
WARMUP_STEPS = 20  # the model's first verdicts and a lost GPU's fall: not replayed
TRACE_STEPS = 240  # one hour at 15 s, replayed in a loop (counters keep climbing)
JOB = "gpu-goodput-exporter"
PORT = 9433
PEAK_FLOPS = 989e12  # H100 SXM dense bf16
TTFT_BUCKETS = ("0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "+Inf")
MODELS = (("llama-3-8b", "vllm", 5200.0), ("llama-3-70b", "vllm", 900.0),
          ("qwen-7b", "sglang", 5000.0))


@dataclass(frozen=True)
class Archetype:
    """One workload in one role; every fleet GPU is one of these."""

    name: str
    workload: patterns.Workload
    role: str  # "train" | "serve" | "notebook" | "none"
    waiting: float = 0.5  # requests waiting in the engine's queue (serve)
    job: bool = False  # a rank of a multi-GPU job (training ranks always are)


_WORKLOADS = {w.name: w for w in patterns.NODE}
ARCHETYPES = {a.name: a for a in (
    Archetype("idle", _WORKLOADS["idle"], "none"),
    Archetype("train", _WORKLOADS["compute_gemm"], "train"),
    Archetype("serve", _WORKLOADS["memory_decode"], "serve"),
    # A serving engine split over two GPUs (tensor parallel): one job, its tokens beside its
    # time split.
    Archetype("serve_tp", _WORKLOADS["memory_decode"], "serve", job=True),
    Archetype("host_bound", _WORKLOADS["host_bound"], "serve", waiting=6.0),
    Archetype("hollow", _WORKLOADS["launch_bound"], "notebook"),
    Archetype("allocated_idle", _WORKLOADS["allocated_idle"], "notebook"),
    Archetype("thermal", _WORKLOADS["thermal_throttled"], "none"),
    Archetype("lost", _WORKLOADS["lost_later"], "none"),
)}
# The hollow notebook time-slices its GPU with a second notebook that only holds memory: the
# fleet has shared GPUs, their holders' series come from the real pipeline, and the hollow
# one is named (GPUHolderBusyButUnproductive) beside the GPU's own alert.
SHARED_WITH_IDLE = {"hollow": 4199}
# Which alert each injected fault raises; every other GPU raises none.
FAULT_ALERTS = {
    "hollow": {"GPUBusyButUnproductive", "GPUHolderBusyButUnproductive"},
    "allocated_idle": {"GPUAllocatedIdle"},
    "host_bound": {"GPUHostBound"},
    "thermal": {"GPUThermalThrottling"},
    "lost": {"GPULost", "GPUProfilingUnavailable"},
}


# --- the plan ---------------------------------------------------------------------------------

JobKey = tuple[str, str, str]
# Where each training job's identity comes from, in turn; a process-tree job is one node's.
JOB_SOURCES = ("kubernetes", "slurm", "process")
# How much more work per step a straggler does than its peers, in turn (measured on an H200
# pair: SM-active gap 0.11 at 10 %, 0.24 at 25 %; the rule's threshold is 0.05).
STRAGGLER_EXTRA = (0.10, 0.25)
# Balanced ranks differ by a hair (0.003 measured on a balanced pair): never a straggler.
BALANCED_JITTER = 0.003


@dataclass
class Gpu:
    node: str
    index: int
    archetype: str
    phase: int  # steps into the archetype's trace
    namespace: str = ""
    pod: str = ""
    job_name: str = ""  # the pod's job label (Kubernetes jobs)
    job: JobKey = ("", "", "")  # (job_source, namespace, job_id) on goodput_gpu_job_info
    sm_scale: float = 1.0  # SM-active time relative to the archetype's (less work per step)
    wait_rate: float = 0.0  # seconds waited on the job's peers per second
    model: str = ""
    engine: str = ""
    tokens_per_sm_second: float = 0.0

    @property
    def uuid(self) -> str:
        digest = hashlib.md5(f"{self.node}/{self.index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


@dataclass
class Fleet:
    nodes: list[str]
    gpus: list[Gpu]
    stragglers: set[tuple[str, str]] = field(default_factory=set)  # (node, gpu)
    balanced_jobs: set[JobKey] = field(default_factory=set)
    straggler_jobs: set[JobKey] = field(default_factory=set)

    def by_node(self) -> dict[str, list[Gpu]]:
        out: dict[str, list[Gpu]] = defaultdict(list)
        for g in self.gpus:
            out[g.node].append(g)
        return out


def node_name(i: int) -> str:
    return f"gpu-node-{i:05d}"


def plan(nodes: int = 1000, gpus: int = 8, seed: int = 27, faults_per_1000: int = 2) -> Fleet:
    """Half the nodes train (jobs of 2 to 4 whole nodes), half serve or host notebooks.
    Every fourth job has a mild straggler on its last node (_train). Faults:
    ``faults_per_1000`` GPUs of each kind per 1,000 nodes, at least 1."""
    rng = random.Random(seed)
    names = [node_name(i) for i in range(nodes)]
    fleet = Fleet(names, [])
    per_node: dict[str, list[Gpu]] = {}
    for n in names:
        per_node[n] = [Gpu(n, i, "idle", rng.randrange(TRACE_STEPS)) for i in range(gpus)]
    training = names[: nodes // 2]
    serving = names[nodes // 2:]
    i, job = 0, 0
    while i < len(training):
        size = min(rng.choice((2, 3, 4)), len(training) - i)
        if size < 2:
            break
        _train(fleet, job, [per_node[n] for n in training[i: i + size]],
               rng.randrange(TRACE_STEPS), rng)
        i += size
        job += 1
    for k, n in enumerate(serving):
        model, engine, rate = MODELS[k % len(MODELS)]
        for g in per_node[n]:
            if g.index < gpus - 1:  # the last GPU of a serving node stays free
                g.archetype, g.namespace = "serve", "inference"
                g.pod = f"{model}-{k:04d}-{g.index}"
                g.model, g.engine, g.tokens_per_sm_second = model, engine, rate
    faults = max(1, nodes * faults_per_1000 // 1000)
    order = list(serving)
    rng.shuffle(order)
    k = 0
    for kind in ("hollow", "allocated_idle", "host_bound", "thermal", "lost"):
        for _ in range(faults):
            # GPU 0 of a serving node; on a small fleet, the next GPU of the same nodes.
            g = per_node[order[k % len(order)]][(k // len(order)) % gpus]
            k += 1
            g.archetype = kind
            if kind in ("hollow", "allocated_idle"):
                g.namespace, g.pod, g.model, g.engine = "research", f"notebook-{g.node}", "", ""
            elif kind in ("thermal", "lost"):
                g.namespace, g.pod, g.model, g.engine = "", "", "", ""
    for k, n in enumerate(serving):
        # Every tenth serving node runs one engine over its GPUs 1 and 2 (a fault may have
        # taken one: then that node keeps single-GPU engines).
        pair = per_node[n][1:3]
        if k % 10 or len(pair) < 2 or any(g.archetype != "serve" for g in pair):
            continue
        key: JobKey = ("kubernetes", "inference", f"{pair[0].model}-tp-{k:04d}")
        for g in pair:
            g.archetype, g.job, g.job_name = "serve_tp", key, key[2]
            g.pod = f"{key[2]}-{g.index}"
        fleet.balanced_jobs.add(key)
    for n in names:
        fleet.gpus.extend(per_node[n])
    return fleet


def _train(fleet: Fleet, job: int, nodes: list[list[Gpu]], phase: int,
           rng: random.Random) -> None:
    """One training job over whole ``nodes``, its ranks in step (one phase). Every fourth job
    has a mild straggler on its last node: the other ranks do 1 / (1 + extra) of its work
    per step and wait the rest (goodput_gpu_job_wait_seconds_total)."""
    name, source = f"train-{job:04d}", JOB_SOURCES[job % len(JOB_SOURCES)]
    straggler = job % 4 == 1
    extra = STRAGGLER_EXTRA[(job // 4) % len(STRAGGLER_EXTRA)] if straggler else 0.0
    keys: list[JobKey] = []
    for r, gpus in enumerate(nodes):
        key: JobKey = {"kubernetes": ("kubernetes", "training", name),
                       "slurm": ("slurm", "", str(40000 + job))}.get(
            source, ("process", "", f"{gpus[0].node}/{1000 + job}"))
        keys.append(key)
        for g in gpus:
            g.archetype, g.phase, g.job = "train", phase, key
            g.sm_scale = (1 - BALANCED_JITTER * (g.index % 2)) / (1 + extra)
            g.wait_rate = extra / (1 + extra)
            if source == "kubernetes":
                g.namespace, g.job_name = "training", name
                g.pod = f"{name}-rank-{r * len(gpus) + g.index}"
    if straggler:
        slow = nodes[-1][rng.randrange(len(nodes[-1]))]
        slow.sm_scale, slow.wait_rate = 1.0, 0.0
        fleet.stragglers.add((slow.node, str(slow.index)))
        fleet.straggler_jobs.add(slow.job)
    fleet.balanced_jobs.update(set(keys) - fleet.straggler_jobs)


def job_key(labels: dict[str, str]) -> JobKey:
    """The job key of a series' labels (an empty namespace is an absent one)."""
    return (labels.get("job_source", ""), labels.get("namespace", ""), labels.get("job_id", ""))


def expected_alerts(fleet: Fleet) -> dict[str, set[tuple[str, str]]]:
    """alert -> the (node, gpu) it must fire for (per-GPU alerts only)."""
    out: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for g in fleet.gpus:
        for alert in FAULT_ALERTS.get(g.archetype, ()):
            out[alert].add((g.node, str(g.index)))
    out["GPUJobStraggler"] = set(fleet.stragglers)
    return out


def shard_of(node: str, shards: int) -> int:
    """Prometheus's hashmod of the target address: md5, last 8 bytes big-endian, mod n."""
    digest = hashlib.md5(f"{node}:{PORT}".encode()).digest()
    return int.from_bytes(digest[8:], "big") % shards


# --- archetype traces: the real pipeline, once per archetype ------------------------------------

Labels = tuple[tuple[str, str], ...]


@dataclass
class Series:
    family: str
    kind: str
    sample: str
    labels: Labels  # without node and gpu; "{uuid}" where the GPU's uuid goes
    values: list[float]
    counter: bool


@dataclass
class Traces:
    gpu: dict[str, list[Series]]  # archetype -> its per-GPU series
    node: list[Series]  # the node's own series (no gpu label)


def _cumulative(sample: str, kind: str) -> bool:
    return kind in ("counter", "histogram") and not sample.endswith("_created")


Row = dict[tuple[str, str, str, str, Labels], float]
_RECORDED: dict[bool, Traces] = {}


def record_archetypes(extended: bool = False) -> Traces:
    """Every archetype run through the exporter's pipeline in virtual time. The run is
    deterministic (virtual clock, fixed patterns) and costs ~20 s of CPU, so it happens once
    per process, encoded both ways (default and ``extended`` families) as it goes: the fleet
    tests (four files, one pytest process) share it. Callers read the traces and never
    change them (Replay builds from them)."""
    if not _RECORDED:
        _RECORDED.update(_record_archetypes())
    return _RECORDED[extended]


def _record_archetypes() -> dict[bool, Traces]:
    t0 = 1000.0
    now = [t0]
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    names = list(ARCHETYPES)
    fakes = [FakeGpu(index=i, physics=GpuPhysics(ARCHETYPES[n].workload.pattern, start=t0),
                     processes=list(ARCHETYPES[n].workload.processes),
                     lost_after=ARCHETYPES[n].workload.lost_after)
             for i, n in enumerate(names)]
    for fake, name in zip(fakes, names, strict=True):
        if name in SHARED_WITH_IDLE:
            busy = fake.processes[0][0]
            fake.processes.append((SHARED_WITH_IDLE[name], 2 << 30))
            fake.process_load = {busy: (1.0, 0.05)}
    session = NvmlSession(FakeNvml(fakes, clock=clock), "simulated")
    session.open()
    sources = [NvmlSource(session, clock=clock), GpmSource(session, clock=clock)]
    store = SnapshotStore("archetype", profiling_order=("gpm",))
    model = NodeModel(ModelConfig(), clock=clock)
    # Encoding only reads the snapshot: both sets come from the one run.
    encoders = {extended: Encoder(collectors.families(collectors.REGISTRY,
                                                      Settings(simulate=True)),
                                  CollectorRegistry(auto_describe=False),
                                  include_optional=extended)
                for extended in (False, True)}
    steps: dict[bool, list[Row]] = {extended: [] for extended in encoders}
    uuids = {str(i): f.uuid for i, f in enumerate(fakes)}
    for i in range(WARMUP_STEPS + TRACE_STEPS):
        # The poll phase wanders, as a real poll loop's does (see sim_recording.record).
        now[0] = t0 + i * STEP + (i * 0.193) % 0.5
        for source in sources:
            store.publish(source.poll_blocking())
        store.publish_verdicts(model.step(store.current, STEP))
        if i < WARMUP_STEPS:
            continue
        for extended, encoder in encoders.items():
            steps[extended].append(_row(encoder.encode(store.current), uuids))
    return {extended: _traces(rows, names, extended) for extended, rows in steps.items()}


def _row(text: bytes, uuids: dict[str, str]) -> Row:
    """One scrape's samples, keyed without node and gpu labels (the uuid as a placeholder)."""
    row: Row = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            labels = dict(s.labels)
            labels.pop("node", None)
            gpu = labels.pop("gpu", "")
            if labels.get("uuid") == uuids.get(gpu):
                labels["uuid"] = "{uuid}"
            row[(gpu, fam.name, fam.type, s.name, tuple(sorted(labels.items())))] = s.value
    return row


def _traces(steps: list[Row], names: list[str], extended: bool) -> Traces:
    # Only series present at every step are replayed (a lost GPU's vanish for good), and
    # counters born during the trace (a regime's seconds appear with its first window): at 0
    # before, as a long-running exporter that has been through the loop once publishes them.
    born = [k for k in dict.fromkeys(k for r in steps for k in r)
            if k not in steps[0] and k[3] == "goodput_gpu_regime_seconds_total"
            and all(k in r for r in steps[next(i for i, r in enumerate(steps) if k in r):])]
    keys = [k for k in steps[0] if all(k in r for r in steps)] + born
    traces = Traces(defaultdict(list), [])
    for key in keys:
        gpu, family, kind, sample, label_set = key
        series = Series(family, kind, sample, label_set, [r.get(key, 0.0) for r in steps],
                        _cumulative(sample, kind))
        if gpu:
            traces.gpu[names[int(gpu)]].append(series)
        else:
            traces.node.append(series)
    _synthesise(traces, extended)
    return traces


def _gauge(own: list[Series]) -> Callable[[str, dict[str, str], list[float]], None]:
    def add(family: str, labels: dict[str, str], values: list[float]) -> None:
        own.append(Series(family, "gauge", family, tuple(sorted(labels.items())),
                          list(values), False))
    return add


def _counter(own: list[Series]) -> Callable[[str, dict[str, str], list[float]], None]:
    """A counter from per-second rates, one per 15 s step."""
    def add(family: str, labels: dict[str, str], rates: list[float]) -> None:
        total, values = 0.0, []
        for r in rates:
            total += r * STEP
            values.append(total)
        own.append(Series(family, "counter", family + "_total",
                          tuple(sorted(labels.items())), values, True))
    return add


def _synthesise(traces: Traces, extended: bool) -> None:
    """Per-archetype series of what the simulated node cannot make (as sim_recording does):
    pod attribution, the XID gauge, serving tokens, queues, KV cache and the model's
    token figures. Labels in braces are filled per fleet GPU."""
    for name, arch in ARCHETYPES.items():
        own = traces.gpu[name]
        by = {s.sample: s.values for s in own if not dict(s.labels)}
        by.update({s.sample: s.values for s in own if s.sample == "goodput_gpu_up"})
        up = by.get("goodput_gpu_up", [1.0] * TRACE_STEPS)
        sm = by.get("goodput_gpu_sm_active_ratio", [0.0] * TRACE_STEPS)
        tensor = by.get("goodput_gpu_tensor_active_ratio", [0.0] * TRACE_STEPS)
        power = by.get("goodput_gpu_power_watts", [0.0] * TRACE_STEPS)
        mem = by.get("goodput_gpu_memory_used_bytes", [0.0] * TRACE_STEPS)

        gauge, counter = _gauge(own), _counter(own)
        if extended:  # an optional family
            gauge("goodput_gpu_last_xid", {}, [0.0 if u else 79.0 for u in up])
        if not up[-1]:
            own.append(Series("goodput_gpu_xid_errors", "counter", "goodput_gpu_xid_errors_total",
                              (("xid", "79"),), [1.0] * TRACE_STEPS, True))
        if arch.role == "train" or arch.job:
            key = {"job_source": "{job_source}", "namespace": "{job_namespace}",
                   "job_id": "{job_id}"}
            gauge("goodput_gpu_job_info", key, [1.0] * TRACE_STEPS)
            # One second a second: the replay scales it by the GPU's wait_rate.
            counter("goodput_gpu_job_wait_seconds", key, [1.0] * TRACE_STEPS)
            # The node model's split of the rank's time in the job: waiting at its wait_rate,
            # working the rest (the replay scales each part, _rank_scale).
            for part in ("working", "waiting"):
                counter("goodput_gpu_job_seconds", {**key, "part": part}, [1.0] * TRACE_STEPS)
        if arch.role != "none":
            pod = {"namespace": "{namespace}", "pod": "{pod}", "container": "main"}
            gauge("goodput_gpu_pod_info", {**pod, "job_name": "{job_name}"}, [1.0] * TRACE_STEPS)
            gauge("goodput_gpu_pod_memory_used_bytes", pod, mem)
            gauge("goodput_gpu_pod_processes", pod, [1.0] * TRACE_STEPS)
        if arch.role != "serve":
            continue
        m = {"model": "{model}", "engine": "{engine}"}
        # Tokens scale with the GPU's rate: the replay multiplies by tokens_per_sm_second.
        counter("goodput_gpu_tokens", {**m, "kind": "generation"}, [0.8 * x for x in sm])
        counter("goodput_gpu_tokens", {**m, "kind": "prompt"}, [0.2 * x for x in sm])
        counter("goodput_gpu_serving_flops", m, [0.45 * x * PEAK_FLOPS for x in tensor])
        counter("goodput_gpu_serving_preemptions", m, [0.01] * TRACE_STEPS)
        gauge("goodput_gpu_serving_requests", {**m, "state": "running"}, [24.0] * TRACE_STEPS)
        gauge("goodput_gpu_serving_requests", {**m, "state": "waiting"},
              [arch.waiting] * TRACE_STEPS)
        gauge("goodput_gpu_kv_cache_usage_ratio", m, [0.35 + 0.5 * x for x in sm])
        gauge("goodput_gpu_tokens_per_sm_second", {}, [1.0 if x else 0.0 for x in sm])
        gauge("goodput_gpu_joules_per_token", {},
              [p / x if x else 0.0 for p, x in zip(power, sm, strict=True)])
        gauge("goodput_gpu_mfu_ratio", {}, [0.45 * x for x in tensor])
    node = traces.node
    for family, labels in (
            ("goodput_exporter_build_info", {"version": "0.1.0", "backend": "simulated",
                                             "python_version": "3.11.7"}),
            ("goodput_attribution_available", {"source": "kubelet", "reason": ""})):
        node.append(Series(family, "gauge", family, tuple(sorted(labels.items())),
                           [1.0] * TRACE_STEPS, False))
    for source in ("nvml", "gpm", "serving"):
        node.append(Series("goodput_exporter_source_up", "gauge", "goodput_exporter_source_up",
                           (("source", source),), [1.0] * TRACE_STEPS, False))


# Series that scale with the GPU's tokens per SM-second (the model's rate): the power
# exponent each is multiplied by.
_SCALED = {"goodput_gpu_tokens_total": 1, "goodput_gpu_tokens_per_sm_second": 1,
           "goodput_gpu_joules_per_token": -1}
# Series that scale with a training rank's share of the work, or its waiting.
_PER_RANK: dict[str, Callable[[Gpu], float]] = {
    "goodput_gpu_sm_active_seconds_total": lambda g: g.sm_scale,
    "goodput_gpu_job_wait_seconds_total": lambda g: g.wait_rate,
}


def _rank_scale(series: Series, g: Gpu) -> float:
    """How much of a per-rank series a fleet GPU shows: its share of the work, its waiting,
    and for the parts of its job time, the waiting part at its wait_rate and the rest
    working."""
    if series.sample == "goodput_gpu_job_seconds_total":
        waiting = dict(series.labels).get("part") == "waiting"
        return g.wait_rate if waiting else 1.0 - g.wait_rate
    return _PER_RANK[series.sample](g) if series.sample in _PER_RANK else 1.0


ORIGIN = 1000 * TRACE_STEPS  # the timeline's step 0 (far from the counters' start)


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


class Replay:
    """Fleet GPUs' series from the archetype traces, at any step of the timeline."""

    def __init__(self, fleet: Fleet, traces: Traces) -> None:
        self.fleet = fleet
        self.traces = traces
        self._gpus = fleet.by_node()
        # A counter's rise over one loop of the trace, so a replay past its end keeps climbing.
        self.rise: dict[int, float] = {}
        for series in [*traces.node, *(s for ss in traces.gpu.values() for s in ss)]:
            if series.counter:
                v = series.values
                self.rise[id(series)] = v[-1] - v[0] + (v[-1] - v[-2])

    def value(self, series: Series, step: int, scale: float = 1.0) -> float:
        loop, j = divmod(step, TRACE_STEPS)
        v = series.values[j]
        if series.counter:
            v += loop * self.rise[id(series)]
        return v * scale

    def node_series(self, node: str,
                    scraped: bool = True) -> Iterator[tuple[Series, str, int, float]]:
        """(series, sample name with labels, phase, scale) of one node; ``scraped`` adds the
        labels Prometheus attaches on scrape (history), live serving leaves that to it."""
        target = f'job="{JOB}",instance="{node}:{PORT}"' if scraped else ""
        for s in self.traces.node:
            labels = ",".join(f'{k}="{v}"' for k, v in s.labels)
            yield s, f'{s.sample}{{{labels},node="{node}",{target}}}', 0, 1.0
        for g in self._gpus[node]:
            fill = {"uuid": g.uuid, "namespace": g.namespace, "pod": g.pod,
                    "job_name": g.job_name, "model": g.model, "engine": g.engine,
                    "job_source": g.job[0], "job_namespace": g.job[1], "job_id": g.job[2]}
            for s in self.traces.gpu[g.archetype]:
                if s.family.startswith("goodput_gpu_pod_") and not g.pod:
                    continue  # a Slurm or process-tree job: no pod
                labels = "".join(f'{k}="{v.format(**fill) if "{" in v else v}",'
                                 for k, v in s.labels)
                power = _SCALED.get(s.sample, 0)
                scale = g.tokens_per_sm_second ** power if g.tokens_per_sm_second else 1.0
                scale *= _rank_scale(s, g)
                yield (s, f'{s.sample}{{{labels}gpu="{g.index}",node="{node}",{target}}}',
                       g.phase, scale)
        for g in self._gpus[node]:
            if g.archetype in ("serve", "serve_tp", "host_bound"):
                url = f"http://{g.pod}.{g.namespace}:8000/metrics"
                yield (self._target_up, f'goodput_serving_target_up{{engine="{g.engine}",'
                       f'model="{g.model}",node="{node}",target="{url}",{target}}}', 0, 1.0)

    _target_up = Series("goodput_serving_target_up", "gauge", "goodput_serving_target_up", (),
                        [1.0] * TRACE_STEPS, False)

    def engine_series(self, node: str) -> Iterator[tuple[str, str, float]]:
        """The vLLM pods' own TTFT histogram (scraped from the engine, not the exporter):
        (family, sample with labels, increment per step)."""
        for g in self._gpus[node]:
            if g.engine != "vllm" or g.archetype not in ("serve", "serve_tp", "host_bound"):
                continue
            typical = 0.9 if g.archetype == "host_bound" else 0.08
            base = f'model_name="{g.model}",namespace="{g.namespace}",pod="{g.pod}"'
            requests = 4.0 * STEP
            for le in TTFT_BUCKETS:
                share = 1.0 if le == "+Inf" else min(1.0, (float(le) / typical) ** 2 / 2)
                yield ("vllm:time_to_first_token_seconds",
                       f'vllm:time_to_first_token_seconds_bucket{{{base},le="{le}"}}',
                       share * requests)
            yield ("vllm:time_to_first_token_seconds",
                   f"vllm:time_to_first_token_seconds_count{{{base}}}", requests)
            yield ("vllm:time_to_first_token_seconds",
                   f"vllm:time_to_first_token_seconds_sum{{{base}}}", requests * typical)



# --- writing history ----------------------------------------------------------------------------

def write_openmetrics(replay: Replay, nodes: list[str], out: Path, start: float, first: int,
                      steps: int, stride: int = 1) -> int:
    """OpenMetrics for ``steps`` samples of ``nodes`` from step ``first`` of the timeline
    (every ``stride``-th 15 s step), timestamped from ``start``. Families stay contiguous, as
    OpenMetrics demands; returns the number of samples written."""
    by_family: dict[str, list[tuple[Series, str, int, float]]] = defaultdict(list)
    engines: dict[str, list[tuple[str, float]]] = defaultdict(list)
    kinds: dict[str, str] = {"vllm:time_to_first_token_seconds": "histogram"}
    for node in nodes:
        for item in replay.node_series(node):
            by_family[item[0].family].append(item)
            kinds[item[0].family] = item[0].kind
        for family, sample, inc in replay.engine_series(node):
            engines[family].append((sample, inc))
    stamps = [f" {start + k * STEP * stride:.3f}\n" for k in range(steps)]
    idx = [first + k * stride for k in range(steps)]
    written = 0
    with out.open("w", buffering=1 << 20) as f:
        for family in sorted(by_family):
            f.write(f"# TYPE {family} {kinds[family]}\n")
            for series, head, phase, scale in by_family[family]:
                value = replay.value
                f.write("".join(f"{head} {_num(value(series, phase + i, scale))}{ts}"
                                for i, ts in zip(idx, stamps, strict=True)))
                written += steps
        for family, items in sorted(engines.items()):
            f.write(f"# TYPE {family} histogram\n")
            for sample, inc in sorted(items):
                f.write("".join(f"{sample} {_num(inc * (i + 1))}{ts}"
                                for i, ts in zip(idx, stamps, strict=True)))
                written += steps
        f.write("# EOF\n")
    return written


def _run(*argv: str, timeout: float = 3600) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed: {result.stdout}{result.stderr}")
    return result.stdout


def backfill_raw(replay: Replay, nodes: list[str], data: Path, scratch: Path, end: float,
                 hours: float, fine_hours: float = 1.0, batch_gpus: int = 2000,
                 log: Callable[[str], None] = print, end_step: int = ORIGIN,
                 include_end: bool = True, coarse_stride: int = 4) -> int:
    """Raw history into the TSDB at ``data``, an hour (and a batch of nodes) at a time: the
    last ``fine_hours`` at 15 s, older hours every ``coarse_stride``-th step (60 s by
    default; what the 24 h panels need). The sample at ``end`` is step ``end_step`` of the
    timeline."""
    promtool = shutil.which("promtool") or "promtool"
    gpus_per_node = max(1, len(replay.fleet.gpus) // max(1, len(replay.fleet.nodes)))
    per_batch = max(1, batch_gpus // gpus_per_node)
    total = 0
    start_step = -int(hours * 3600 / STEP)
    # Hour windows, oldest first; each is [h_start, h_start + 3600).
    h = 0.0
    while h < hours:
        span = min(1.0, hours - h)
        fine = hours - h <= fine_hours + 1e-9
        stride = 1 if fine else coarse_stride
        first = start_step + int(h * 3600 / STEP)
        steps = int(span * 3600 / STEP / stride)
        t_start = end - (hours - h) * 3600
        if h + span >= hours and include_end:
            steps += 1  # include the end itself
        for b in range(0, len(nodes), per_batch):
            t = time.monotonic()
            om = scratch / "chunk.om"
            n = write_openmetrics(replay, nodes[b: b + per_batch], om, t_start,
                                  end_step + first, steps, stride)
            gen = time.monotonic() - t
            size = om.stat().st_size
            t = time.monotonic()
            _run(promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data))
            om.unlink()
            log(f"hour {h:.0f} nodes {b}-{b + per_batch}: {n} samples, {size / 1e6:.0f} MB, "
                f"generate {gen:.1f} s, promtool {time.monotonic() - t:.1f} s")
            total += n
        h += span
    return total


# --- serving live -------------------------------------------------------------------------------

def serve(replay: Replay, nodes: list[str], host: str = "127.0.0.1",
          ports: list[int] | None = None, smooth: bool = False) -> list[ThreadingHTTPServer]:
    """One HTTP server per node, each serving that node's /metrics at the current step.
    ``smooth`` moves counters between two steps' values with the clock, so a scrape more
    often than every 15 s sees them rise at every scrape (rates from a window's first
    samples then read as they will later)."""
    t0 = time.time()
    servers = []
    for k, node in enumerate(nodes):
        items = [(s, head.replace(",}", "}"), phase, scale)
                 for s, head, phase, scale in replay.node_series(node, scraped=False)]

        class Handler(BaseHTTPRequestHandler):
            series = items

            def do_GET(self) -> None:
                at = (time.time() - t0) / STEP
                step, frac = ORIGIN + int(at), (at - int(at) if smooth else 0.0)

                def value(s: Series, index: int, scale: float) -> float:
                    v = replay.value(s, index, scale)
                    if frac and s.counter:
                        v += frac * (replay.value(s, index + 1, scale) - v)
                    return v

                body = "".join(f"{head} {_num(value(s, phase + step, scale))}\n"
                               for s, head, phase, scale in self.series)
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        port = ports[k] if ports else 0
        server = ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    return servers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("write", "serve"):
        p = sub.add_parser(name)
        p.add_argument("--nodes", type=int, default=1000)
        p.add_argument("--gpus", type=int, default=8)
        p.add_argument("--extended-metrics", action="store_true")
    w = sub.choices["write"]
    w.add_argument("--out", type=Path, required=True, help="TSDB directory to write blocks to")
    w.add_argument("--hours", type=float, default=1.0)
    w.add_argument("--fine-hours", type=float, default=1.0, help="hours at 15 s; older at 60 s")
    w.add_argument("--end", type=float, default=0.0, help="unix time of the last sample (now)")
    w.add_argument("--batch-gpus", type=int, default=2000)
    args = parser.parse_args(argv)
    configure(level="warning")  # the archetypes' regime changes are not news here
    fleet = plan(args.nodes, args.gpus)
    t = time.monotonic()
    replay = Replay(fleet, record_archetypes(args.extended_metrics))
    print(f"archetypes recorded in {time.monotonic() - t:.1f} s", file=sys.stderr)
    if args.command == "serve":
        servers = serve(replay, fleet.nodes)
        for node, s in zip(fleet.nodes, servers, strict=True):
            print(f"{node} 127.0.0.1:{s.server_address[1]} shard {shard_of(node, 2)}")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0
    end = args.end or float(int(time.time()))
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = args.out.parent / (args.out.name + ".scratch")
    scratch.mkdir(exist_ok=True)
    total = backfill_raw(replay, fleet.nodes, args.out, scratch, end, args.hours,
                         args.fine_hours, args.batch_gpus,
                         log=lambda m: print(m, file=sys.stderr))
    shutil.rmtree(scratch)
    print(f"{total} samples for {len(fleet.gpus)} GPUs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
