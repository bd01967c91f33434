"""The views' multi-GPU jobs: which GPUs a job holds, which one it waits on, and where its
GPU time went (working, transferring, waiting, host-stalled, idle).

The split is the rate of ``goodput_gpu_job_seconds_total`` (the parts of one GPU sum to its
seconds in the job) over the same window as every other rate of the views, summed over the
job's GPUs and shown as shares: a person reads "wait 0.33" as "a third of this job's GPU
time went to waiting on its straggler" without doing the division.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

PARTS: tuple[tuple[str, str], ...] = (
    ("working", "work"),
    ("transferring", "xfer"),
    ("waiting", "wait"),
    ("host_stalled", "host"),
    ("idle", "idle"),
)
"""The ``part`` label's values, in the order shown, each with its short name."""

JobKey = tuple[str, str, str]
"""(job_source, namespace, job_id): a job is the same job only within one source."""

Split = Mapping[tuple[str, str, str, str, str], float]
"""Seconds per second by (job_source, namespace, job_id, gpu, part)."""


@dataclass(frozen=True)
class JobRow:
    """One multi-GPU job as the views show it."""

    job_source: str
    namespace: str
    job_id: str
    gpus: tuple[str, ...] = ()
    straggler: str = ""
    """The GPU the job waits on; empty when none stands out."""
    shares: tuple[tuple[str, float], ...] = ()
    """(part, share of the job's GPU time) in PARTS order; empty until rates are known."""
    seconds: float = 0.0
    """How long its longest-held GPU here has been in the job: the model names a straggler
    only after watching for a while, so a young job without one is not yet judged."""

    @property
    def name(self) -> str:
        return "/".join(p for p in (self.namespace, self.job_id) if p)

    def split_text(self) -> str:
        """``work 0.61 xfer 0.05 wait 0.33 host 0.01 idle 0.00``, or ``-`` while unknown."""
        short = dict(PARTS)
        return " ".join(f"{short[p]} {v:.2f}" for p, v in self.shares) or "-"

    def text(self) -> str:
        """Everything a filter can match."""
        return " ".join((self.name, self.job_source, *self.gpus)).lower()


def _shares(split: Split, key: JobKey) -> tuple[tuple[str, float], ...]:
    seconds: dict[str, float] = defaultdict(float)
    for (source, namespace, job_id, _, part), rate in split.items():
        if (source, namespace, job_id) == key:
            seconds[part] += rate
    total = sum(seconds.values())
    if total <= 0:
        return ()
    return tuple((part, seconds.get(part, 0.0) / total) for part, _ in PARTS)


def job_rows(samples: Mapping[str, list[tuple[dict[str, str], float]]], split: Split,
             order: Callable[[str], tuple[int, ...]]) -> tuple[JobRow, ...]:
    """The jobs ``goodput_job_gpus`` names, with GPUs from ``goodput_gpu_job_info``, the
    straggler from ``goodput_job_straggler`` and the split's shares."""

    def key(labels: Mapping[str, str]) -> JobKey:
        return (labels.get("job_source", ""), labels.get("namespace", ""),
                labels.get("job_id", ""))

    jobs = [key(labels) for labels, value in samples.get("goodput_job_gpus", []) if value > 1]
    gpus: dict[JobKey, set[str]] = defaultdict(set)
    for labels, _ in samples.get("goodput_gpu_job_info", []):
        gpus[key(labels)].add(labels.get("gpu", ""))
    straggler = {key(labels): labels.get("gpu", "")
                 for labels, value in samples.get("goodput_job_straggler", []) if value == 1}
    held: dict[tuple[JobKey, str], float] = defaultdict(float)
    for labels, value in samples.get("goodput_gpu_job_seconds_total", []):
        held[(key(labels), labels.get("gpu", ""))] += value
    return tuple(
        JobRow(*job, gpus=tuple(sorted(gpus[job] - {""}, key=order)),
               straggler=straggler.get(job, ""), shares=_shares(split, job),
               seconds=max((v for (k, _), v in held.items() if k == job), default=0.0))
        for job in sorted(set(jobs))
    )
