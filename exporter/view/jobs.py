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

MEANING: dict[str, str] = {
    "working": "its own kernels",
    "transferring": "the links: NVLink bytes a collective needs, PCIe copies to and from "
                    "the host",
    "waiting": "a peer GPU: a straggler, imbalance between ranks, a pipeline's bubbles",
    "host_stalled": "no kernel queued: storage, the input pipeline, checkpointing, "
                    "a Python step, or a serving engine with no requests",
    "idle": "no process on the GPU",
}
"""What each part means to the person who has to act on it."""

LOSS: dict[str, str] = {
    "transferring": "the links",
    "waiting": "a peer GPU",
    "host_stalled": "its host (storage, input pipeline, checkpointing)",
    "idle": "no process",
}
"""Where a job loses GPU time, in the fewest words that say where to look."""
LOSS_SHOWN = 0.1

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
    tokens_per_second: float | None = None
    """Generated tokens per second of the serving engine(s) on the job's GPUs; None when
    none is attributed (a training job)."""
    working_gpus: float | None = None
    """GPU-seconds per second the job's GPUs spent working (the split's working part)."""

    @property
    def tokens_per_working_second(self) -> float | None:
        """Tokens per GPU-second working: what a serving job makes of the GPU time it does
        not lose to waiting, transfers or its host."""
        if self.tokens_per_second is None or not self.working_gpus:
            return None
        return self.tokens_per_second / self.working_gpus

    def tokens_text(self) -> str:
        """``tokens 812/s, 540 per GPU-second working``, or "" for a job making none."""
        if self.tokens_per_second is None:
            return ""
        per = self.tokens_per_working_second
        tail = f", {per:.0f} per GPU-second working" if per is not None else ""
        return f"tokens {self.tokens_per_second:.0f}/s{tail}"

    @property
    def name(self) -> str:
        return "/".join(p for p in (self.namespace, self.job_id) if p)

    def split_text(self) -> str:
        """``work 0.61 xfer 0.05 wait 0.33 host 0.01 idle 0.00``, or ``-`` while unknown.
        A serving job's ends with its tokens per GPU-second working instead of an idle
        share of 0.00 (an engine always has a process), so the line keeps its width."""
        short = dict(PARTS)
        per = self.tokens_per_working_second
        shares = [(p, v) for p, v in self.shares
                  if not (per is not None and p == "idle" and v < 0.005)]
        text = " ".join(f"{short[p]} {v:.2f}" for p, v in shares) or "-"
        return text if per is None else f"{text} tok/w {per:.0f}"

    def loss_text(self) -> str:
        """``the job loses 0.42 to a peer GPU``: its largest part besides working, when it
        is at least a tenth of its GPU time; "" otherwise."""
        lost = [(v, p) for p, v in self.shares if p in LOSS and v >= LOSS_SHOWN]
        if not lost:
            return ""
        share, part = max(lost)
        return f"the job loses {share:.2f} to {LOSS[part]}"

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


def _working(split: Split, key: JobKey) -> float | None:
    rates = [rate for (source, namespace, job_id, _, part), rate in split.items()
             if (source, namespace, job_id) == key and part == "working"]
    return sum(rates) if rates else None


def _tokens(tokens: Mapping[str, float], gpus: set[str]) -> float | None:
    made = [tokens[g] for g in gpus if g in tokens]
    return sum(made) if made else None


def job_rows(samples: Mapping[str, list[tuple[dict[str, str], float]]], split: Split,
             order: Callable[[str], tuple[int, ...]],
             tokens: Mapping[str, float] | None = None) -> tuple[JobRow, ...]:
    """The jobs ``goodput_job_gpus`` names, with GPUs from ``goodput_gpu_job_info``, the
    straggler from ``goodput_job_straggler``, the split's shares and, for a serving job,
    its tokens (``tokens``: generated tokens per second by GPU) per GPU-second working."""

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
               seconds=max((v for (k, _), v in held.items() if k == job), default=0.0),
               tokens_per_second=_tokens(tokens or {}, gpus[job]),
               working_gpus=_working(split, job))
        for job in sorted(set(jobs))
    )
