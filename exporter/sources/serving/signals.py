"""The serving signals, declared once (issue #32: a signal was spelled four ways on its path).

Every normalised signal an engine table may map (exporter/sources/serving/engines.py), the
ledger bounds (``accumulate.py``), the source totals or collects per GPU (``source.py``),
:class:`~exporter.readings.ServedModel` carries and the model's window builder
(exporter/model/windows.py) turns into rates is one :class:`Signal` here. Its ``name`` is
the key everywhere; token counters reach ``ServedModel.tokens`` by their ``token_kind``
(the ``kind`` label of ``goodput_gpu_tokens_total``), every other signal the
``ServedModel`` field :attr:`Signal.served_as` names.

Request outcomes, time to first token and inter-token latency are not signals: nothing in
the exporter reads them (the serving dashboard reads the engines' own histograms), so the
engine tables only use their families to recognise an engine and never parse them.

This module imports nothing of the exporter, so the model can read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge"]
Split = Literal["split", "replicate"]
Agg = Literal["sum", "mean", "max"]
Merge = Literal["sum", "max"]


@dataclass(frozen=True)
class Signal:
    """One normalised serving signal and how it behaves once read.

    ``split``: a counter of the engine as a whole is divided evenly across its GPUs (tokens:
    summing GPUs gives the engine total); ``replicate``: every GPU of the engine gets the
    whole value (a gauge every tensor-parallel rank shares, busy wall seconds, FLOPs the
    engine already reports per GPU). ``agg`` joins several samples of one engine for one
    model and GPU; ``merge`` joins gauges of several engines publishing on one GPU row.
    """

    name: str
    kind: Kind
    unit: str
    meaning: str
    split: Split = "split"
    agg: Agg = "sum"
    merge: Merge = "sum"
    token_kind: str = ""
    """For token counters: the ``kind`` label they are published under."""
    forward_pass: bool = True
    """Token counters only: false for tokens that cost no GPU work (prefix-cache hits)."""
    field: str = ""
    """The ``ServedModel`` field it feeds when not its name (token counters: ``tokens``)."""
    ceiling: float = 1e6
    """Largest plausible growth per GPU per second (token counters: the configured
    ``serving.max_tokens_per_second_per_gpu`` instead): far above what one GPU serves, far
    below an overflow."""

    @property
    def is_token(self) -> bool:
        return bool(self.token_kind)

    @property
    def served_as(self) -> str:
        """The ``ServedModel`` field this signal's per-GPU value lands in."""
        return "tokens" if self.is_token else (self.field or self.name)


PROMPT_TOKENS = Signal(
    "prompt_tokens", "counter", "tokens",
    "prompt tokens the engine computed (prefill work on the GPU)", token_kind="prompt",
)  # fmt: skip
PROMPT_CACHED_TOKENS = Signal(
    "prompt_cached_tokens", "counter", "tokens",
    "prompt tokens served from the prefix cache (no GPU work)",
    token_kind="prompt_cached", forward_pass=False,
)  # fmt: skip
GENERATION_TOKENS = Signal(
    "generation_tokens", "counter", "tokens", "tokens the engine generated",
    token_kind="generation",
)  # fmt: skip
REQUESTS_RUNNING = Signal(
    "requests_running", "gauge", "requests", "requests the engine is running",
    split="replicate",
)  # fmt: skip
REQUESTS_WAITING = Signal(
    "requests_waiting", "gauge", "requests", "requests the engine keeps waiting",
    split="replicate",
)  # fmt: skip
KV_CACHE_USAGE = Signal(
    "kv_cache_usage", "gauge", "ratio", "share of the engine's KV-cache blocks in use",
    split="replicate", agg="mean", merge="max",
)  # fmt: skip
PREEMPTIONS = Signal("preemptions", "counter", "requests", "requests the engine preempted")
BUSY_SECONDS = Signal(
    "busy_seconds", "counter", "seconds", "seconds the engine ran forward passes",
    split="replicate",
)  # fmt: skip
FLOPS = Signal(
    "flops_per_gpu", "counter", "flops", "floating-point operations the engine estimates per GPU",
    split="replicate", field="flops",
    ceiling=1e17,  # ~10x the fastest dense peak in exporter/model/flops.py (B200 FP4, 9e15)
)  # fmt: skip

ALL: tuple[Signal, ...] = (
    PROMPT_TOKENS,
    PROMPT_CACHED_TOKENS,
    GENERATION_TOKENS,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    KV_CACHE_USAGE,
    PREEMPTIONS,
    BUSY_SECONDS,
    FLOPS,
)
SIGNALS: dict[str, Signal] = {s.name: s for s in ALL}
"""Signal name -> its declaration: the only names an engine table may map."""
TOKENS: tuple[Signal, ...] = tuple(s for s in ALL if s.is_token)
"""Token counters, published in ``ServedModel.tokens`` by kind."""
FIELDS: tuple[Signal, ...] = tuple(s for s in ALL if not s.is_token)
"""Signals carried in a ``ServedModel`` field of their own name."""
NO_FORWARD_PASS: frozenset[str] = frozenset(s.token_kind for s in TOKENS if not s.forward_pass)
"""Token kinds that cost no GPU work: not output for the model's busy_no_output."""
