"""Holders of a shared GPU as the views show them: one line under their GPU each.

Read from the same ``/metrics`` text as the GPU rows (``goodput_gpu_holder_*``), so ``top``
and the landing page show what Prometheus stores: each pod's (or process's) share of the
GPU's kernel time, its apportioned SM activity, its regime and whether it is busy but
unproductive.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Samples = Mapping[str, list[tuple[dict[str, str], float]]]

FLAG_WORDS = {"hollow_busy": "hollow busy", "busy_no_output": "busy, no tokens"}


@dataclass(frozen=True)
class HolderRow:
    """One pod (or process) holding a GPU several share."""

    gpu: str
    namespace: str = ""
    pod: str = ""
    container: str = ""
    pid: str = ""
    share: float | None = None
    sm: float | None = None
    regime: str = ""
    flags: tuple[str, ...] = ()
    tokens_per_second: float | None = None

    @property
    def who(self) -> str:
        if self.pod:
            return "/".join(p for p in (self.namespace, self.pod) if p)
        return "others" if self.pid == "other" else f"pid {self.pid}"

    def text(self) -> str:
        """``infer/a  share 0.50  SM 0.01  launch_bound  hollow busy``."""
        parts = [self.who]
        if self.share is not None:
            parts.append(f"share {self.share:.2f}")
        if self.sm is not None:
            parts.append(f"SM {self.sm:.2f}")
        parts.append(self.regime or "-")
        parts += [FLAG_WORDS.get(f, f) for f in self.flags]
        if self.tokens_per_second is not None:
            parts.append(f"{self.tokens_per_second:.0f} tok/s")
        return "  ".join(parts)


KEYS = ("namespace", "pod", "container", "pid")
VALUES = {
    "goodput_gpu_holder_kernel_time_ratio": "share",
    "goodput_gpu_holder_sm_active_ratio": "sm",
    "goodput_gpu_holder_tokens_per_second": "tokens_per_second",
}


def holder_rows(samples: Samples) -> tuple[HolderRow, ...]:
    """Every holder of every shared GPU, by GPU then busiest first."""
    values: dict[tuple[str, ...], dict[str, float]] = defaultdict(dict)
    regime: dict[tuple[str, ...], str] = {}

    def key(labels: Mapping[str, str]) -> tuple[str, ...]:
        return (labels.get("gpu", ""), *(labels.get(k, "") for k in KEYS))

    for name, field in VALUES.items():
        for labels, value in samples.get(name, []):
            values[key(labels)][field] = value
    for labels, value in samples.get("goodput_gpu_holder_regime", []):
        if value == 1:
            regime[key(labels)] = labels.get("regime", "")
    flags: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for labels, value in samples.get("goodput_gpu_holder_busy_unproductive", []):
        if value == 1:
            flags[key(labels)].append(labels.get("reason", ""))
    rows = []
    for k in set(values) | set(regime):
        found = values.get(k, {})
        gpu, namespace, pod, container, pid = k
        rows.append(HolderRow(
            gpu, namespace, pod, container, pid, share=found.get("share"), sm=found.get("sm"),
            regime=regime.get(k, ""), flags=tuple(sorted(flags.get(k, ()))),
            tokens_per_second=found.get("tokens_per_second")))
    return tuple(sorted(rows, key=lambda h: (h.gpu, -(h.share or 0.0), h.who)))


def of_gpu(holders: Sequence[HolderRow], gpu: str) -> list[HolderRow]:
    return [h for h in holders if h.gpu == gpu]
