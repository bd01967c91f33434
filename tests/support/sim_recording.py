"""Record the simulated node's /metrics over simulated time, as OpenMetrics for backfill.

The GPU and model families come from the real code path: the simulated pynvml drop-in, the
NVML and GPM sources, the efficiency model and the snapshot renderer, all driven by one
virtual clock so thirty minutes of data take seconds to make and are the same on every run.
What the simulated node cannot produce (serving engines' tokens and queues, the model
figures that need tokens, Kubernetes attribution, XIDs from the event thread) is synthesised
from the same snapshot with the names of the design, so every dashboard query has data.
`promtool tsdb create-blocks-from openmetrics` turns the text into TSDB blocks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporter import collectors
from exporter.metrics.encode import Encoder
from exporter.model.config import ModelConfig
from exporter.model.node import NodeModel
from exporter.sim.fake_nvml import simulated_node
from exporter.snapshot import SnapshotStore
from exporter.sources.nvml import NvmlSource
from exporter.sources.nvml_session import NvmlSession
from exporter.sources.profiling.gpm import GpmSource
from exporter.wiring.config import Settings

Key = tuple[tuple[str, str], ...]

# Who uses which simulated GPU: (namespace, pod, model, engine, tokens per SM-second).
TENANTS: dict[str, tuple[str, str, str, str, float]] = {
    "1": ("research", "notebook-0", "", "", 0.0),
    "2": ("inference", "llama-70b-0", "llama-3-70b", "vllm", 900.0),
    "3": ("inference", "llama-8b-0", "llama-3-8b", "vllm", 5200.0),
    "4": ("inference", "llama-8b-1", "llama-3-8b", "vllm", 4800.0),
    "5": ("inference", "qwen-7b-0", "qwen-7b", "sglang", 5000.0),
    "6": ("inference", "llama-70b-1", "llama-3-70b", "vllm", 850.0),
    "7": ("inference", "llama-8b-2", "llama-3-8b", "vllm", 1500.0),
}
# Pods that are ranks of one job (job_name from the pod's job label): GPU 2 works while
# GPU 5's kernels barely fill the SMs, the shape of a straggler and a rank waiting on it.
JOBS: dict[str, str] = {"2": "llama-train", "5": "llama-train"}
STRAGGLER = "2"
# A second pod on gpu 1: a shared GPU has one goodput_gpu_pod_info series per pod.
SHARED: dict[str, tuple[str, str]] = {"1": ("research", "notebook-1")}
# A GPU two processes share (time-slicing): holders of a shared GPU, by pid.
SHARED_PROCESSES_GPU = 5
# What Prometheus adds on scrape; the mixin's default selector is job="gpu-goodput-exporter".
TARGET = {"job": "gpu-goodput-exporter", "instance": "sim-node:9433"}
# ... and on a scrape of the engine pods themselves (a PodMonitor of the engines).
ENGINE_TARGET = {"job": "vllm-engines"}
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, math.inf)
PEAK_FLOPS = 989e12  # H100 SXM dense bf16


class Recorder:
    """Accumulates (family, series) -> [(timestamp, value)]."""

    def __init__(self) -> None:
        self.types: dict[str, str] = {}
        self.series: dict[tuple[str, str, Key], list[tuple[float, float]]] = defaultdict(list)

    def add(self, family: str, kind: str, sample: str, labels: dict[str, str], ts: float,
            value: float) -> None:
        self.types.setdefault(family, kind)
        self.series[(family, sample, tuple(sorted(labels.items())))].append((ts, value))

    def openmetrics(self) -> str:
        by_family: dict[str, list[str]] = defaultdict(list)
        for (family, sample, key), points in sorted(self.series.items()):
            # The engines' own histograms are scraped from the engine pods, not the exporter.
            target = ENGINE_TARGET if family.startswith("vllm:") else TARGET
            labels = ",".join(f'{k}="{v}"' for k, v in (*key, *sorted(target.items())))
            for ts, value in points:
                by_family[family].append(f"{sample}{{{labels}}} {_num(value)} {ts:.3f}")
        out: list[str] = []
        for family in sorted(by_family):
            out.append(f"# TYPE {family} {self.types[family]}")
            out.extend(by_family[family])
        out.append("# EOF")
        return "\n".join(out) + "\n"


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def record(end: float, duration: float = 1800.0, step: float = 15.0,
           node: str = "sim-node") -> str:
    """OpenMetrics text of ``duration`` seconds of the simulated node, ending at ``end``."""
    t0 = 1000.0
    now = [t0]
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    nvml = simulated_node(clock=clock, gpus=8)
    # GPU 5 (tiny kernels) time-sliced by two processes, 70/30: its holders' series come
    # from the real path (NVML's per-process samples, the model), by pid (no cgroup source).
    shared = nvml.gpus[SHARED_PROCESSES_GPU]
    shared.processes = [*shared.processes, (4125, 2 << 30)]
    shared.process_load = {shared.processes[0][0]: (0.7, 0.1), 4125: (0.3, 0.0)}
    session = NvmlSession(nvml, "simulated")
    session.open()
    sources = [NvmlSource(session, clock=clock), GpmSource(session, clock=clock)]
    store = SnapshotStore(node, profiling_order=("gpm",))
    model = NodeModel(ModelConfig(), clock=clock)
    encoder = Encoder(
        collectors.families(collectors.REGISTRY, Settings(simulate=True)),
        CollectorRegistry(auto_describe=False),
        include_optional=True,  # panels that say "needs --extended-metrics" have data too
    )
    rec = Recorder()
    synth = _Synthetic(rec, node)
    steps = int(duration // step)
    for i in range(steps + 1):
        # Poll at a phase that wanders like a real poll loop's does: the simulated NVML
        # reports instantaneous utilisation, and polls locked to the 0.5 s period of the
        # host-bound workload would alias it to always-busy or always-idle.
        now[0] = t0 + i * step + (i * 0.193) % 0.5
        ts = end - duration + i * step
        for source in sources:
            store.publish(source.poll_blocking())
        store.publish_verdicts(model.step(store.current, step))
        gpu_values: dict[str, dict[str, float]] = defaultdict(dict)
        uuids: dict[str, str] = {}
        text = encoder.encode(store.current).decode()
        for family in text_string_to_metric_families(text):
            name = family.name + "_total" if family.type == "counter" else family.name
            for sample in family.samples:
                labels = dict(sample.labels)
                gpu = labels.get("gpu")
                if gpu is not None:
                    # Data series carry node, gpu and their own labels; the identity (uuid,
                    # name) lives on goodput_gpu_info, pods on goodput_gpu_pod_info.
                    if name == "goodput_gpu_info":
                        uuids[gpu] = labels["uuid"]
                    plain = not sample.labels.get("reason") and not sample.labels.get("domain")
                    if plain or name == "goodput_gpu_up":
                        gpu_values[gpu].setdefault(name, sample.value)
                rec.add(family.name, family.type, sample.name, labels, ts, sample.value)
        synth.step(ts, step, gpu_values, uuids)
    return rec.openmetrics()


def _pods(gpu: str) -> list[tuple[str, str]]:
    """(namespace, pod) of every pod using ``gpu``."""
    tenant = TENANTS.get(gpu)
    pods = [(tenant[0], tenant[1])] if tenant else []
    if gpu in SHARED:
        pods.append(SHARED[gpu])
    return pods


class _Synthetic:
    """Families the simulated node does not produce, derived from the core's values: the
    serving engines' (the simulated node runs none), the model's figures that need tokens,
    Kubernetes attribution, and XIDs (their source runs on an event thread)."""

    def __init__(self, rec: Recorder, node: str) -> None:
        self.rec = rec
        self.node = node
        self.last: dict[str, dict[str, float]] = {}
        self.totals: dict[tuple[str, ...], float] = defaultdict(float)

    def _counter(self, family: str, labels: dict[str, str], ts: float, inc: float) -> None:
        key = (family, *sorted(f"{k}={v}" for k, v in labels.items()))
        self.totals[key] += inc
        self.rec.add(family, "counter", family + "_total", labels, ts, self.totals[key])

    def _gauge(self, family: str, labels: dict[str, str], ts: float, value: float) -> None:
        self.rec.add(family, "gauge", family, labels, ts, value)

    def step(self, ts: float, dt: float, values: dict[str, dict[str, float]],
             uuids: dict[str, str]) -> None:
        node = {"node": self.node}
        for name, labels in (("goodput_exporter_build_info",
                              {"version": "0.1.0", "backend": "simulated",
                               "python_version": "3.11.7"}),
                             ("goodput_attribution_available",
                              {"source": "kubelet", "reason": ""})):
            self._gauge(name, {**node, **labels}, ts, 1.0)
        for source in ("nvml", "gpm", "serving"):
            self._gauge("goodput_exporter_source_up", {**node, "source": source}, ts, 1.0)
            self._gauge("goodput_exporter_last_success_timestamp_seconds",
                        {**node, "source": source}, ts, ts)
        for gpu, v in sorted(values.items()):
            base = {"gpu": gpu, "node": self.node}
            for namespace, pod in _pods(gpu):
                self._gauge("goodput_gpu_pod_info", {**base, "namespace": namespace, "pod": pod,
                                                     "container": "main",
                                                     "job_name": JOBS.get(gpu, "")},
                            ts, 1.0)
            self._device(ts, dt, base, v)
        self._jobs(ts, dt)
        self._targets(ts)

    def _jobs(self, ts: float, dt: float) -> None:
        """The job identity of the job's ranks (goodput_gpu_job_info, from the pods' job
        label), the straggler the node's model names (GPU 2), the time GPU 5 waits on it
        (goodput_gpu_job_wait_seconds_total) and each rank's time split
        (goodput_gpu_job_seconds_total)."""
        for gpu, job in sorted(JOBS.items()):
            key = {"job_source": "kubernetes", "namespace": TENANTS[gpu][0], "job_id": job}
            self._gauge("goodput_gpu_job_info", {"gpu": gpu, "node": self.node, **key}, ts, 1.0)
            labels = {"gpu": gpu, "node": self.node, **key}
            if gpu == STRAGGLER:
                self._gauge("goodput_job_straggler", labels, ts, 1.0)
            else:
                self._counter("goodput_gpu_job_wait_seconds", labels, ts, 0.6 * dt)
            # The node model's split of the GPU's time in the job (parts add up to dt).
            waiting = 0.0 if gpu == STRAGGLER else 0.6
            for part, share in (("working", 1.0 - waiting), ("waiting", waiting)):
                self._counter("goodput_gpu_job_seconds", {**labels, "part": part}, ts,
                              share * dt)

    def _targets(self, ts: float) -> None:
        seen = set()
        for _gpu, (namespace, pod, model, engine, _k) in sorted(TENANTS.items()):
            if not model or pod in seen:
                continue
            seen.add(pod)
            target = f"http://{pod}.{namespace}:8000/metrics"
            labels = {"node": self.node, "target": target, "engine": engine, "model": model}
            self._gauge("goodput_serving_target_up", labels, ts, 1.0)
            self._gauge("goodput_serving_scrape_duration_seconds",
                        {"node": self.node, "target": target}, ts, 0.004)
        down = {"node": self.node, "target": "http://10.0.0.9:8000/metrics"}
        self._gauge("goodput_serving_target_up", {**down, "engine": "tgi", "model": "mistral-7b"},
                    ts, 0.0)
        self._gauge("goodput_serving_target_error_info", {**down, "reason": "connection_refused"},
                    ts, 1.0)

    def _device(self, ts: float, dt: float, base: dict[str, str], v: dict[str, float]) -> None:
        gpu = base["gpu"]
        up = v.get("goodput_gpu_up", 1.0)
        sm = v.get("goodput_gpu_sm_active_ratio", 0.0)
        tensor = v.get("goodput_gpu_tensor_active_ratio", 0.0)
        power = v.get("goodput_gpu_power_watts", 0.0)
        # The XID source runs on an event thread, outside this virtual clock: a lost GPU has
        # reported XID 79 (fallen off the bus), as the simulated driver does.
        self._gauge("goodput_gpu_last_xid", base, ts, 0.0 if up else 79.0)
        if not up:
            self.rec.add("goodput_gpu_xid_errors", "counter", "goodput_gpu_xid_errors_total",
                         {**base, "xid": "79"}, ts, 1.0)
        tenant = TENANTS.get(gpu)
        if tenant is not None:
            self._gauge("goodput_gpu_pod_memory_used_bytes",
                        {**base, "namespace": tenant[0], "pod": tenant[1], "container": "main"},
                        ts, v.get("goodput_gpu_memory_used_bytes", 0.0))
            self._gauge("goodput_gpu_pod_processes",
                        {**base, "namespace": tenant[0], "pod": tenant[1], "container": "main"},
                        ts, 1.0)
        if tenant is None or not tenant[2] or not up:
            return
        _ns, _pod, model, engine, per_sm_second = tenant
        m = {**base, "model": model, "engine": engine}
        tokens = per_sm_second * sm
        self._counter("goodput_gpu_tokens", {**m, "kind": "generation"}, ts, 0.8 * tokens * dt)
        self._counter("goodput_gpu_tokens", {**m, "kind": "prompt"}, ts, 0.2 * tokens * dt)
        flops = 0.45 * tensor * PEAK_FLOPS
        self._counter("goodput_gpu_serving_flops", m, ts, flops * dt)
        self._counter("goodput_gpu_serving_preemptions", m, ts, 0.01 * dt)
        waiting = 6.0 if gpu == "4" else 0.5
        self._gauge("goodput_gpu_serving_requests", {**m, "state": "running"}, ts, 24.0)
        self._gauge("goodput_gpu_serving_requests", {**m, "state": "waiting"}, ts, waiting)
        self._gauge("goodput_gpu_kv_cache_usage_ratio", m, ts, 0.35 + 0.5 * sm)
        # The model publishes these per GPU, without model labels.
        self._gauge("goodput_gpu_tokens_per_sm_second", base, ts, per_sm_second if sm else 0.0)
        self._gauge("goodput_gpu_joules_per_token", base, ts, power / tokens if tokens else 0.0)
        self._gauge("goodput_gpu_mfu_ratio", base, ts, flops / PEAK_FLOPS)
        if engine == "vllm":
            self._ttft(ts, dt, model, {"namespace": _ns, "pod": _pod},
                       0.08 if gpu != "4" else 0.9)

    def _ttft(self, ts: float, dt: float, model: str, base: dict[str, str],
              typical: float) -> None:
        """vLLM's own TTFT histogram, as a PodMonitor scrape of the engine would store it."""
        labels = {**base, "model_name": model}
        requests = 4.0 * dt
        for le in TTFT_BUCKETS:
            share = 1.0 if math.isinf(le) else min(1.0, (le / typical) ** 2 / 2)
            self._hist_bucket(labels, le, ts, share * requests)
        self._hist_tail(labels, ts, requests, requests * typical)

    def _hist_bucket(self, labels: dict[str, str], le: float, ts: float, inc: float) -> None:
        le_text = "+Inf" if math.isinf(le) else repr(le)
        key = ("ttft_bucket", le_text, *sorted(labels.values()))
        self.totals[key] += inc
        self.rec.add("vllm:time_to_first_token_seconds", "histogram",
                     "vllm:time_to_first_token_seconds_bucket", {**labels, "le": le_text},
                     ts, self.totals[key])

    def _hist_tail(self, labels: dict[str, str], ts: float, count: float, total: float) -> None:
        for suffix, inc in (("_count", count), ("_sum", total)):
            key = ("ttft" + suffix, *sorted(labels.values()))
            self.totals[key] += inc
            self.rec.add("vllm:time_to_first_token_seconds", "histogram",
                         "vllm:time_to_first_token_seconds" + suffix, labels, ts,
                         self.totals[key])


def families(text: str) -> Iterable[str]:
    return (line.split()[2] for line in text.splitlines() if line.startswith("# TYPE"))
