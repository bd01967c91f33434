"""The model's families: verdicts per GPU and stragglers per job, from ``snap.verdicts``."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from exporter.metrics.families import Family, GpuFamilies, NodeFamilies, Row, counter, gauge
from exporter.model.core import REGIMES, UNPRODUCTIVE_REASONS
from exporter.readings import GpuVerdict, HolderVerdict, JobIdentity, NodeVerdicts

COLLECTOR = "model"


def _regime(v: GpuVerdict) -> Iterable[Row]:
    return (((v.regime,), 1.0),)


def _flags(v: GpuVerdict) -> Iterable[Row]:
    flags = {"hollow_busy": v.hollow_busy, "busy_no_output": v.busy_no_output}
    return (((r,), 1.0) for r in UNPRODUCTIVE_REASONS if flags[r])


def _regime_seconds(v: GpuVerdict) -> Iterable[Row]:
    """Only the regimes the GPU has spent time in: a GPU visits two or three of the nine,
    and the other counters were 19 % of a node's series and most of the samples the regime
    rule reads (docs/scaling.md). A regime's counter appears with its first window."""
    seen = dict(v.regime_seconds)
    return (((r,), seen[r]) for r in REGIMES if seen.get(r, 0.0) > 0)


GPU = GpuFamilies[GpuVerdict](
    COLLECTOR,
    lambda snap: snap.verdicts.gpus,
    (
        Family(
            "goodput_gpu_regime",
            "gauge",
            "1, labelled with the bottleneck regime the GPU is in: one of "
            f"{', '.join(REGIMES)}. Only the current regime has a series (the others would "
            "be 8 zeros per GPU). Debounced for alerts: a regime is entered after "
            "model.enter_windows windows (at once after a quiet spell when one window is "
            "conclusive) and left after model.leave_windows.",
            _regime,
            labels=("regime",),
        ),
        Family(
            "goodput_gpu_regime_seconds_total",
            "counter",
            "Seconds classified into each regime, window by window and undebounced: rate() "
            "gives the exact share of time per regime over any range, short bursts included. "
            "Only regimes the GPU has spent time in have a series; one appears with its first "
            "window.",
            _regime_seconds,
            labels=("regime",),
            unit="seconds",
        ),
        Family(
            "goodput_gpu_busy_unproductive",
            "gauge",
            "1 while the GPU looks busy but does little useful work, by reason: hollow_busy "
            "(kernel time high, SM active low) or busy_no_output (busy while the attributed "
            "engine makes almost no tokens). Only flagged reasons have a series; never "
            "flagged while profiling is unusable.",
            _flags,
            labels=("reason",),
        ),
        counter(
            "goodput_gpu_busy_unproductive_seconds_total",
            "Seconds spent busy but unproductive (either reason).",
            lambda v: v.busy_unproductive_seconds,
            unit="seconds",
        ),
        gauge(
            "goodput_gpu_hollow_utilization_ratio",
            "Kernel-time utilization not backed by SM activity: max(utilization - sm_active, 0).",
            lambda v: v.hollow_utilization,
            unit="ratio",
            default=False,
        ),
        gauge(
            "goodput_gpu_efficiency_score_ratio",
            "0..1 efficiency score: weighted SM active, occupancy and the activity of the "
            "resource the regime says should be busy, scaled down when the attributed engine "
            "makes no tokens.",
            lambda v: v.efficiency_score,
            unit="ratio",
            default=False,
        ),
        gauge(
            "goodput_gpu_tokens_per_sm_second",
            "Attributed (generated) tokens per second divided by the SM active ratio: tokens "
            "per second of fully active SMs.",
            lambda v: v.tokens_per_sm_second,
        ),
        gauge(
            "goodput_gpu_joules_per_token",
            "Board power over the attributed (generated) token rate, both over the serving "
            "source's last scrape interval (1 s by default); absent when no such tokens were "
            "made in it. Exact over any range in PromQL: rate(goodput_gpu_energy_joules_total) "
            "/ on (node, gpu) sum by (node, gpu) "
            "(rate(goodput_gpu_tokens_total{kind=\"generation\"})).",
            lambda v: v.joules_per_token,
            unit="joules",
        ),
        gauge(
            "goodput_gpu_mfu_ratio",
            "Model FLOPs utilization: the FLOP/s of the attributed models divided by the GPU's "
            "(or MIG slice's) peak dense FLOP/s for the model's dtype. Per model, the FLOPs "
            "come from the engine's own estimate where it exports one (vLLM and SGLang "
            "estimated_flops_per_gpu), else from tokens/s x 2 x model.model_parameters; "
            "absent when neither is known, and absent (counted in "
            "goodput_exporter_source_errors_total{source=\"model\",reason=\"mfu_implausible\"}) "
            "when it would exceed 1, never clipped.",
            lambda v: v.mfu,
            unit="ratio",
        ),
        gauge(
            "goodput_gpu_profiling_stale",
            "1 when profiling is said to be available but its counters stopped moving or read "
            "silent zeros (all ratios exactly 0 while kernels run and power is high).",
            lambda v: v.profiling_stale,
        ),
    ),
)


JOB_LABELS: tuple[str, ...] = ("job_source", "namespace", "job_id")
"""The job key on every job series, whatever the identity source (``JobIdentity.key``)."""


def _stragglers(v: NodeVerdicts) -> Iterable[Row]:
    return (((*j.identity.key, j.straggler), 1.0) for j in v.jobs if j.straggler)


def _jobs(v: NodeVerdicts) -> Iterable[Row]:
    return ((j.identity.key, float(len(j.gpus))) for j in v.jobs)


def _waited(v: NodeVerdicts) -> Iterable[Row]:
    return (((*j.identity.key, gpu), seconds) for j in v.jobs for gpu, seconds in j.wait_seconds)


def _parts(v: NodeVerdicts) -> Iterable[Row]:
    return (((*j.identity.key, gpu, part), seconds)
            for j in v.jobs for gpu, part, seconds in j.part_seconds)


def _identity(identity: JobIdentity) -> Iterable[Row]:
    return ((identity.key, 1.0),)


JOB_INFO = GpuFamilies[JobIdentity](
    COLLECTOR,
    lambda snap: snap.verdicts.gpu_jobs,
    (
        Family(
            "goodput_gpu_job_info",
            "gauge",
            "Constant 1 per GPU and the job it works for, whichever source said so: "
            "job_source is the job source that named it (docs/jobs.md lists them), "
            "(job_source, namespace, job_id) the job key every job series and rule uses; "
            "namespace is set for Kubernetes only. Join on node and gpu.",
            _identity,
            labels=JOB_LABELS,
        ),
    ),
)
"""Published with the verdicts of the step that resolved it (``NodeVerdicts.gpu_jobs``), so
the job a GPU's info names is the job its verdicts judged, in every snapshot, and any
identity source's jobs appear whichever identity collectors are on."""


NODE = NodeFamilies[NodeVerdicts](
    COLLECTOR,
    lambda snap: snap.verdicts if snap.verdicts.jobs else None,
    (
        Family(
            "goodput_job_gpus",
            "gauge",
            "GPUs of this node held by one distributed job, judged together: two or more "
            "GPUs here, or one of a job whose source launches across nodes (its peers may "
            "be on other nodes; docs/jobs.md says which). The job is (job_source, namespace, "
            "job_id) as on goodput_gpu_job_info.",
            _jobs,
            labels=JOB_LABELS,
        ),
        Family(
            "goodput_job_straggler",
            "gauge",
            "1 for the GPU of a multi-GPU job that holds the job back: it waits least while "
            "its peers wait measurably more for it, persistently (a rank that only waits is "
            "never named). No series while the job is balanced or its imbalance moves.",
            _stragglers,
            labels=(*JOB_LABELS, "gpu"),
        ),
        Family(
            "goodput_gpu_job_wait_seconds_total",
            "counter",
            "Estimated seconds this GPU waited on the other GPUs of its job (in collectives "
            "or for a peer's data) instead of working: sum by job of its rate() is the "
            "GPUs lost waiting; docs/efficiency.md says how it is estimated.",
            _waited,
            labels=(*JOB_LABELS, "gpu"),
            unit="seconds",
        ),
        Family(
            "goodput_gpu_job_seconds_total",
            "counter",
            "Seconds this GPU spent in its distributed job (goodput_job_gpus), by part: "
            "working (its own kernels), transferring (link bytes a collective needs, "
            "copy engines), waiting (on its peers; as goodput_gpu_job_wait_seconds_total), "
            "host_stalled (no kernel resident) and idle (no process). One GPU's parts sum "
            "to its seconds in the job; docs/efficiency.md says how each is estimated.",
            _parts,
            labels=(*JOB_LABELS, "gpu", "part"),
            unit="seconds",
        ),
    ),
)


# holders of a shared GPU ---------------------------------------------------------------------


def holder_families(
    namespace: str = "namespace", pod: str = "pod", container: str = "container"
) -> GpuFamilies[tuple[HolderVerdict, ...]]:
    """Per holder of a GPU two or more pods (or processes) share: exporter/model/holders.py.
    The pod label names follow ``kubernetes.*_label``; ``pid`` names a holder outside any pod."""
    labels = (namespace, pod, container, "pid")
    return GpuFamilies[tuple[HolderVerdict, ...]](
        COLLECTOR,
        lambda snap: snap.verdicts.holders,
        (*_holder_activity(labels), *_holder_outcome(labels)),
    )


def _holder_rows(value: Callable[[HolderVerdict], float | bool | None]) -> Callable[
    [tuple[HolderVerdict, ...]], Iterable[Row]
]:
    """One sample per holder for which ``value`` is known."""
    def out(holders: tuple[HolderVerdict, ...]) -> Iterable[Row]:
        for h in holders:
            v = value(h)
            if v is not None:
                yield h.key, float(v)

    return out


def _holder_regime(holders: tuple[HolderVerdict, ...]) -> Iterable[Row]:
    return (((*h.key, h.regime), 1.0) for h in holders)


def _holder_flags(holders: tuple[HolderVerdict, ...]) -> Iterable[Row]:
    for h in holders:
        on = {"hollow_busy": h.hollow_busy, "busy_no_output": h.busy_no_output}
        yield from (((*h.key, r), 1.0) for r in UNPRODUCTIVE_REASONS if on[r])


def _holder_activity(labels: tuple[str, ...]) -> tuple[Family[tuple[HolderVerdict, ...]], ...]:
    """What a holder ran: its kernel time and SM activity (measured and apportioned)."""
    return (

        Family(
            "goodput_gpu_holder_kernel_time_ratio",
            "gauge",
            "Share of the window's kernel time this holder of a shared GPU (time-slicing "
            "or MPS) ran, from NVML's per-process samples: the holders of one GPU sum to "
            "its kernel time. Only GPUs two or more pods or processes hold have holders.",
            _holder_rows(lambda h: h.kernel_ratio),
            labels=labels,
            unit="ratio",
        ),
        Family(
            "goodput_gpu_holder_kernel_seconds_total",
            "counter",
            "goodput_gpu_holder_kernel_time_ratio integrated over windows: rate() is its "
            "share of the GPU's time over any range.",
            _holder_rows(lambda h: h.kernel_seconds),
            labels=labels,
            unit="seconds",
        ),
        Family(
            "goodput_gpu_holder_sm_active_ratio",
            "gauge",
            "The GPU's SM activity apportioned to this holder (an estimate: unmixed from "
            "windows whose mix of holders differed, else in proportion to kernel time; "
            "docs/kubernetes.md). The holders of one GPU sum to its SM active ratio.",
            _holder_rows(lambda h: h.sm_active_ratio),
            labels=labels,
            unit="ratio",
        ),
        Family(
            "goodput_gpu_holder_sm_active_seconds_total",
            "counter",
            "goodput_gpu_holder_sm_active_ratio integrated over windows.",
            _holder_rows(lambda h: h.sm_active_seconds),
            labels=labels,
            unit="seconds",
        ),
        Family(
            "goodput_gpu_holder_regime",
            "gauge",
            "1, labelled with the regime of this holder judged in its own frame (the time "
            "it had: its kernel time plus the time nobody ran), debounced like "
            "goodput_gpu_regime.",
            _holder_regime,
            labels=(*labels, "regime"),
        ),
    )


def _holder_outcome(labels: tuple[str, ...]) -> tuple[Family[tuple[HolderVerdict, ...]], ...]:
    """What came of it: its regime and flags, tokens, energy and memory."""
    return (
        Family(
            "goodput_gpu_holder_busy_unproductive",
            "gauge",
            "1 while this holder of a shared GPU looks busy but does little useful work, "
            "by reason (hollow_busy, busy_no_output), as goodput_gpu_busy_unproductive "
            "for a whole GPU: names the pod that is hollow on a GPU others share.",
            _holder_flags,
            labels=(*labels, "reason"),
        ),
        Family(
            "goodput_gpu_holder_tokens_per_second",
            "gauge",
            "Generated tokens per second of the serving engine this holder runs (its pod, "
            "or its process tree); absent for holders that serve nothing.",
            _holder_rows(lambda h: h.tokens_per_second),
            labels=labels,
        ),
        Family(
            "goodput_gpu_holder_tokens_per_kernel_second",
            "gauge",
            "Generated tokens per second of this holder's own kernel time: tokens per "
            "working GPU-second, comparable across holders of different shares.",
            _holder_rows(lambda h: h.tokens_per_kernel_second),
            labels=labels,
        ),
        Family(
            "goodput_gpu_holder_energy_joules_total",
            "counter",
            "The GPU's energy apportioned to this holder by kernel time (board power x "
            "its kernel time share x seconds; an estimate). Energy while no holder ran "
            "stays with the GPU.",
            _holder_rows(lambda h: h.energy_joules),
            labels=labels,
            unit="joules",
        ),
        Family(
            "goodput_gpu_holder_memory_used_bytes",
            "gauge",
            "Device memory this holder's processes hold (NVML's compute-process list).",
            _holder_rows(lambda h: h.memory_used_bytes),
            labels=labels,
            unit="bytes",
        ),
    )
