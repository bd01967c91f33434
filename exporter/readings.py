"""Typed contracts between the stages of the daemon.

Sources publish these frozen dataclasses into the snapshot; the efficiency model reads their
fields; the exposition maps their fields to metric families (``exporter/metrics/families``).
No stage finds another's data by a metric name, so renaming a metric can never starve the
model, and mypy checks every hand-over.

Units are base units throughout: ratios 0..1, bytes, seconds, watts, joules, hertz. ``None``
means "not read" (unsupported, failed, or not yet a window), never zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# identity ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Device:
    """Identity of one GPU or MIG instance.

    ``gpu`` is the value of the ``gpu`` label: the NVML index as a string for a whole GPU,
    ``"<parent index>-<gpu instance id>"`` for a MIG instance (the key dcgm-exporter uses).
    ``mig_profile`` is the slice's profile name (``1g.10gb``...), which sets its peak FLOPs.
    """

    gpu: str
    uuid: str
    name: str = ""
    pci_bus_id: str = ""
    driver_version: str = ""
    parent_uuid: str = ""
    gpu_instance_id: str = ""
    compute_instance_id: str = ""
    mig_profile: str = ""
    link_peaks: tuple[tuple[str, float], ...] = ()
    """(pcie | nvlink, usable bytes per second per direction) where NVML tells the link's
    generation and width; a MIG instance shares its parent's links."""

    @property
    def is_mig(self) -> bool:
        return bool(self.parent_uuid)


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """A compute process NVML lists on a device; kept for pod and serving attribution."""

    gpu: str
    pid: int
    used_memory_bytes: int | None = None
    mps_client: bool = False
    """Listed with an MPS compute context (a client of an MPS control daemon)."""


@dataclass(frozen=True, slots=True)
class ProcessActivity:
    """What NVML's per-process utilization samples say one process ran on a device since the
    previous poll (``nvmlDeviceGetProcessesUtilizationInfo``). Each sample covers one of the
    driver's sample periods (equal lengths), so the sums weigh processes against each other;
    the model turns them into shares of the GPU's kernel time (exporter/model/holders.py)."""

    pid: int
    samples: int
    kernel: float
    """Sum over the samples of ``smUtil`` / 100 (kernel time in that period)."""
    memory: float = 0.0
    """Sum of ``memUtil`` / 100 (device memory read or written)."""
    encoder: float = 0.0
    decoder: float = 0.0

    @property
    def kernel_mean(self) -> float:
        """NVML's own per-process figure: the mean ``smUtil`` of its samples, 0..1."""
        return self.kernel / self.samples if self.samples else 0.0


# NVML ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuState:
    """What one poll of a GPU source (NVML, or any source publishing a :class:`GpuReading`)
    read of one device. ``up`` false carries the ``reason``."""

    up: bool = True
    reason: str = ""
    utilization: float | None = None
    """Share of the poll window any kernel ran (nvidia-smi's utilization), averaged from
    NVML's utilization samples (or NVML's last sample period: ``utilization_method``)."""
    utilization_seconds: float | None = None
    """Busy seconds integrated over the samples (or polls): the counter ``rate()`` reads
    exactly."""
    utilization_method: str = ""
    """samples | last_period (exporter/sources/utilization.py); "" when not read."""
    memory_controller_utilization: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    temperature_celsius: float | None = None
    clocks_hertz: tuple[tuple[str, float], ...] = ()
    """(domain, hertz) for the sm and memory clocks."""
    max_clocks_hertz: tuple[tuple[str, float], ...] = ()
    clock_events: tuple[tuple[str, bool], ...] = ()
    """(reason, active) for every clock-event (throttle) reason NVML reports."""
    clock_event_seconds: tuple[tuple[str, float], ...] = ()
    ecc_errors: tuple[tuple[str, float], ...] = ()
    """(corrected | uncorrected, volatile count)."""
    remapped_rows: tuple[tuple[str, float], ...] = ()
    """(correctable | uncorrectable, rows)."""
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    processes: tuple[ProcessInfo, ...] = ()
    process_count: int | None = None
    """None when the process list could not be read on this poll."""
    process_activity: tuple[ProcessActivity, ...] | None = None
    """Per-process samples since the previous poll, by pid; None when not read (MIG,
    unsupported, the first poll, a failed read), () when no process ran a kernel."""


@dataclass(frozen=True, slots=True)
class XidState:
    """XID critical-error events since start on one GPU."""

    counts: tuple[tuple[int, int], ...] = ()
    last: int = 0


# profiling -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProfilingWindow:
    """One window of profiling values in base units; None where the backend has no value."""

    seconds: float
    graphics_active: float | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    tensor_pipes: tuple[tuple[str, float], ...] = ()
    dram_active: float | None = None
    pipes: tuple[tuple[str, float], ...] = ()
    """(fp64 | fp32 | fp16 | integer, ratio)."""
    pcie_bytes_per_second: tuple[tuple[str, float], ...] = ()
    """(tx | rx, bytes per second); tx is out of the GPU."""
    nvlink_bytes_per_second: tuple[tuple[str, float], ...] = ()

    def pipe(self, name: str) -> float | None:
        return dict(self.pipes).get(name)

    def link_rates(self, link: str) -> tuple[tuple[str, float], ...]:
        """(direction, bytes/s) of ``link`` (pcie | nvlink)."""
        return self.pcie_bytes_per_second if link == "pcie" else self.nvlink_bytes_per_second

@dataclass(frozen=True, slots=True)
class ProfilingTotals:
    """Window ratios integrated over time, so ``rate()`` of them is exact over any range."""

    profiled_seconds: float = 0.0
    sm_active_seconds: float | None = None
    sm_occupancy_seconds: float | None = None
    tensor_active_seconds: float | None = None
    dram_active_seconds: float | None = None
    pcie_bytes: tuple[tuple[str, float], ...] = ()
    nvlink_bytes: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class ProfilingStatus:
    """One profiling backend's state on one GPU.

    ``available`` false says why in ``reason`` (unsupported, no_permission, ...); a backend
    that serves the GPU repeats its last ``window`` between windows so series do not flap,
    and ``sequence`` grows by one per new window so consumers can tell a repeat from a new one.
    """

    backend: str
    available: bool
    reason: str = ""
    window: ProfilingWindow | None = None
    totals: ProfilingTotals | None = None
    sequence: int = 0


# Kubernetes ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerGpus:
    """The GPU devices of one resource the kubelet assigned to one container."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    gpus: tuple[str, ...]
    job: str = ""
    """The pod's job label (``kubernetes.job_labels``), "" when unknown or not read."""

    @property
    def holder(self) -> tuple[str, str, str]:
        return (self.namespace, self.pod, self.container)


@dataclass(frozen=True, slots=True)
class PodAssignments:
    """Which containers the kubelet says hold which GPUs (pod-resources ``List``)."""

    containers: tuple[ContainerGpus, ...] = ()

    def pod_gpus(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """(namespace, pod) -> the gpu labels its containers hold."""
        found: dict[tuple[str, str], set[str]] = {}
        for entry in self.containers:
            if entry.gpus:
                found.setdefault((entry.namespace, entry.pod), set()).update(entry.gpus)
        return {key: tuple(sorted(gpus)) for key, gpus in sorted(found.items())}

    def job_gpus(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """(namespace, job) -> the gpu labels its pods hold; a pod without a known job name
        is its own job (named by the pod), so pods of one job on this node judge together."""
        found: dict[tuple[str, str], set[str]] = {}
        for entry in self.containers:
            if entry.gpus:
                key = (entry.namespace, entry.job or entry.pod)
                found.setdefault(key, set()).update(entry.gpus)
        return {key: tuple(sorted(gpus)) for key, gpus in sorted(found.items())}

    def holders(self, gpu: str) -> tuple[tuple[str, str, str], ...]:
        """Sorted unique (namespace, pod, container) holding ``gpu``."""
        return tuple(sorted({c.holder for c in self.containers if gpu in c.gpus}))


@dataclass(frozen=True, slots=True)
class PodJobs:
    """Job names of the pods on this node, read from their labels on the API server."""

    jobs: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, pod) -> job name, for the pods that carry one of the job labels."""
    ips: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, pod) -> the pod's IP (``status.podIP``): where its processes' ports are
    reached from the exporter's own network namespace (NCCL's RAS port, docs/jobs.md)."""


@dataclass(frozen=True, slots=True)
class PodUsage:
    """Processes and memory of one pod's container on one GPU (from cgroups)."""

    gpu: str
    namespace: str
    pod: str
    container: str
    processes: int
    memory_used_bytes: float | None = None
    pids: tuple[int, ...] = ()
    """The host pids of those processes: what joins NVML's per-process samples to the pod."""


# jobs ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobSource:
    """A kind of job identity, declared by the source that reads it, with the strength of
    its word: when two sources name a GPU's job, the stronger wins (:func:`strongest`).
    The built-in ones, strongest first: the kubelet's pods (:data:`KUBERNETES_JOBS`, 60), a
    Slurm cgroup or variable (50), dcgm-exporter's HPC job map (40), MPI (30), torchrun (20),
    the process session (10): the scheduler's own word over a launcher's, a launcher's over
    a process tree's. A new source picks its place between them; no list is edited.

    Everything that treats its jobs differently is declared here, and read from here only
    (its identities carry it): no module keeps a list of source names."""

    name: str
    strength: int
    spans_nodes: bool = field(kw_only=True)
    """Its launcher starts ranks across nodes (Slurm, MPI, torchrun, an HPC job map): a job
    of it is judged even with one GPU on this node (its waiting and split need no peer here;
    the rules compare the nodes). Not so for a pod or a process session, where one GPU alone
    is a single-GPU program. Required, so no source is left unjudged by omission."""
    variables: tuple[str, ...] = field(default=(), kw_only=True)
    """The environment variables of a GPU process that name its job, when the source is read
    from ``/proc/<pid>/environ`` (exporter/sources/jobs/identity.py reads exactly these, of
    the sources declared there); their value is the job id."""

    def identity(self, job_id: str, namespace: str = "") -> JobIdentity:
        return JobIdentity(self.name, job_id, namespace, strength=self.strength,
                           spans_nodes=self.spans_nodes)


@dataclass(frozen=True, slots=True)
class JobIdentity:
    """Which job a GPU works for, whatever told us: the key every rule, panel and the model
    group by is (source, namespace, job_id)."""

    source: str
    """The :class:`JobSource` that read it (its name)."""
    job_id: str
    """Unique within its source across the cluster: a Kubernetes job label (else the pod),
    a Slurm job id, a torchrun run id, an MPI/PMIx namespace, ``<node>/<session>`` for a
    process tree. Bounded in length by the source that read it."""
    namespace: str = ""
    """The Kubernetes namespace; "" for every other source."""
    strength: int = field(kw_only=True, compare=False)
    """Its source's strength (:attr:`JobSource.strength`): required, so no source can be
    outranked by omission. Not part of the identity (equality, the key)."""
    spans_nodes: bool = field(kw_only=True, compare=False)
    """Its source's :attr:`JobSource.spans_nodes`: judged with one GPU on this node."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.source, self.namespace, self.job_id)


KUBERNETES_JOBS = JobSource("kubernetes", 60, spans_nodes=False)
"""The kubelet's pods (a job label, else the pod), joined into jobs by the model's step
(exporter/model/job_identity.py)."""


def strongest(identities: Iterable[JobIdentity]) -> JobIdentity | None:
    """The one ranking of job identities: the strongest source's, ties broken by key, so
    the answer never depends on the order they were found in."""
    return min(identities, key=lambda j: (-j.strength, j.key), default=None)


@dataclass(frozen=True, slots=True)
class JobAssignments:
    """What one job-identity source says about the GPUs of this node: gpu -> job. Several
    sources may publish one each; the model's step resolves them once with :func:`strongest`
    (exporter/model/job_identity.py)."""

    source: str
    gpus: Mapping[str, JobIdentity] = field(default_factory=dict)


# serving -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServedModel:
    """One (model, engine) pair's signals on one GPU: one field per signal declared in
    exporter/sources/serving/signals.py (its ``served_as``; tests/serving/test_signals.py
    keeps the two in step), token counters together in ``tokens``."""

    model: str
    engine: str
    tokens: tuple[tuple[str, float], ...] = ()
    """(kind, total tokens attributed to this GPU): prompt, prompt_cached, generation."""
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None
    flops: float | None = None
    """Cumulative FLOPs the engine estimates it ran on this GPU."""
    preemptions: float | None = None
    busy_seconds: float | None = None

@dataclass(frozen=True, slots=True)
class TargetStatus:
    """Health of one serving target and where its work was attributed."""

    target: str
    """The target's display name: its URL without credentials, or namespace/pod:port."""
    up: bool
    engine: str = ""
    model: str = ""
    reason: str = ""
    scrape_seconds: float = 0.0
    wait_seconds: float = 0.0
    """How long its last scrape waited for a scrape slot before it started."""
    gpus: tuple[str, ...] = ()
    via: str = "none"
    dropped: tuple[tuple[str, float], ...] = ()
    """(reason, engine values refused since the target appeared): non_finite, negative."""
    namespace: str = ""
    pod: str = ""
    """The discovered pod serving it, "" for a target from the config file."""
    pids: tuple[int, ...] = ()
    """NVML compute processes that are the engine or its descendants (attributed by process):
    what names the holder of a shared GPU that makes these tokens."""


@dataclass(frozen=True, slots=True)
class ServingState:
    gpus: Mapping[str, tuple[ServedModel, ...]] = field(default_factory=dict)
    targets: tuple[TargetStatus, ...] = ()
    discovery: tuple[bool, str] | None = None
    """(watch works, reason) when pod discovery is on."""
    targets_dropped: tuple[tuple[str, int], ...] = ()
    """(reason, discovered targets not scraped now): duplicate, max_targets,
    max_targets_per_namespace, bad_pod."""
    scrapes_limited: tuple[tuple[str, int], ...] = ()
    """(reason, scrapes delayed or dropped since start): slow_share_full, preempted,
    queued, max_targets (exporter/sources/serving/pool.py)."""


# collector status ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Availability:
    """Whether one attribution path works (kubelet, cgroup), as the metric says it."""

    source: str
    reason: str = ""

    @property
    def ok(self) -> bool:
        return not self.reason


# NCCL ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CollectiveState:
    """NCCL collectives the processes on one GPU launched, as NCCL's RAS counts them
    (``exporter/sources/nccl``): what tells a latency-bound collective's own time from
    waiting, whatever bytes it moves."""

    total: float
    """Collectives launched since the exporter first saw their communicators (cumulative)."""
    per_second: float | None
    """Launch rate over each communicator's latest span between two sightings, summed; None
    until one on this GPU has been seen twice."""


@dataclass(frozen=True, slots=True)
class CollectiveReading:
    """What NCCL's RAS endpoints on this node said of the communicators with a rank here."""

    gpus: Mapping[str, CollectiveState] = field(default_factory=dict)
    answered: bool = False
    """Some endpoint answered this poll (none listening: no NCCL job with RAS on the node)."""
    communicators: int = 0
    """Communicators with a rank on this node's GPUs, tracked now."""
    dropped: tuple[tuple[str, int], ...] = ()
    """(reason, count since start) of RAS input the caps refused."""


# one reading per collector (the payload of its SourceResult) ------------------------------


@dataclass(frozen=True, slots=True)
class GpuReading:
    """What one poll of a GPU source read: its devices and every one's state. Any GPU
    source publishes a subclass of its own (one owner per type); the snapshot joins them all
    into ``Snapshot.inventory`` and ``Snapshot.gpu_states``, which the model, the GPU
    families and every source keyed by ``gpu`` read. Device ``gpu`` labels must not collide
    across sources."""

    inventory: tuple[Device, ...] = ()
    gpus: Mapping[str, GpuState] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NvmlReading(GpuReading):
    """What one NVML poll read (the simulated node publishes it too)."""


@dataclass(frozen=True, slots=True)
class XidReading:
    """XID counts and last codes per GPU."""

    gpus: Mapping[str, XidState] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProfilingReading:
    """One profiling backend's status (and window) per GPU; several backends may answer."""

    gpus: Mapping[str, ProfilingStatus] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodUsageReading:
    """GPU processes and memory per pod's container (from cgroups)."""

    pods: tuple[PodUsage, ...] = ()


# verdicts ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuVerdict:
    """What the efficiency model concluded for one GPU after one window."""

    regime: str
    """Debounced regime (what alerts use)."""
    window_regime: str
    """This window's own classification, undebounced."""
    hollow_busy: bool = False
    busy_no_output: bool = False
    profiling_stale: bool = False
    hollow_utilization: float | None = None
    efficiency_score: float | None = None
    tokens_per_sm_second: float | None = None
    joules_per_token: float | None = None
    mfu: float | None = None
    busy_unproductive_seconds: float = 0.0
    regime_seconds: tuple[tuple[str, float], ...] = ()
    """Cumulative seconds per undebounced regime, so ``rate()`` gives exact shares."""
    peers: tuple[str, ...] = ()
    """GPUs of the same job on this node that the verdict was judged against."""

    @property
    def busy_unproductive(self) -> bool:
        return self.hollow_busy or self.busy_no_output


@dataclass(frozen=True, slots=True)
class JobVerdict:
    """A job (whatever its identity source) spanning several GPUs of this node."""

    identity: JobIdentity
    gpus: tuple[str, ...]
    straggler: str = ""
    """The GPU holding the others back, "" when the job is balanced."""
    wait_seconds: tuple[tuple[str, float], ...] = ()
    """(gpu, cumulative seconds it waited on its peers in this job), for every GPU of the
    job: rate() gives the share of time each GPU lost waiting."""
    part_seconds: tuple[tuple[str, str, float], ...] = ()
    """(gpu, part, cumulative seconds): where each GPU's time in this job went (working,
    transferring, waiting, host_stalled, idle; exporter/model/jobs.py), the parts of one
    GPU summing to its seconds in the job."""


@dataclass(frozen=True, slots=True)
class HolderVerdict:
    """One holder of a shared GPU (a pod's container, else a process) after one window.

    ``kernel_ratio`` is its share of the window's kernel time, from NVML's per-process
    samples, scaled so the holders of a GPU sum to its kernel time; ``sm_active_ratio`` and
    the energy are the GPU-wide values apportioned to it (estimates, exporter/model/holders.py).
    """

    namespace: str
    pod: str
    container: str
    pid: str
    """The process id for a holder outside any pod, "" for a pod, ``other`` for the holders
    folded together past ``model.holders_max_per_gpu``."""
    processes: int = 0
    memory_used_bytes: float | None = None
    kernel_ratio: float | None = 0.0
    """None for an MPS client whose kernel time NVML gives to the MPS server (unsplit)."""
    kernel_seconds: float | None = 0.0
    sm_active_ratio: float | None = None
    sm_active_seconds: float | None = None
    regime: str = "unknown"
    hollow_busy: bool = False
    busy_no_output: bool = False
    tokens_per_second: float | None = None
    tokens_per_kernel_second: float | None = None
    energy_joules: float | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.namespace, self.pod, self.container, self.pid)

    @property
    def busy_unproductive(self) -> bool:
        return self.hollow_busy or self.busy_no_output


@dataclass(frozen=True, slots=True)
class NodeVerdicts:
    """The model's output for the whole node after one step."""

    gpus: Mapping[str, GpuVerdict] = field(default_factory=dict)
    jobs: tuple[JobVerdict, ...] = ()
    holders: Mapping[str, tuple[HolderVerdict, ...]] = field(default_factory=dict)
    """gpu -> its holders, for GPUs two or more holders share (sorted by key)."""
    gpu_jobs: Mapping[str, JobIdentity] = field(default_factory=dict)
    """gpu -> the job it works for, resolved once in this step from every identity source
    (exporter/model/job_identity.py): what ``jobs`` judged and ``goodput_gpu_job_info`` says."""
    errors: Mapping[str, int] = field(default_factory=dict)
