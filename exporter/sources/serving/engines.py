"""Alias tables: where each engine (and version) keeps each normalised signal.

This module is data. One :class:`EngineTable` per engine and version maps a normalised
signal (declared once in exporter/sources/serving/signals.py) to the exposition families
that carry it, as alternatives tried in order (the first family present wins, so a renamed
family is listed after its successor). Family names are the ones the text parser reports
from ``# TYPE``: counters without their ``_total`` suffix, whatever suffix the engine
wrote. Sources: the engines' collector code as summarised in docs/serving.md.

Families of request outcomes and latency histograms (TTFT, inter-token latency) are
``markers``: they help recognise an engine and its version, and are never parsed, since
nothing in the exporter reads them.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, replace

from exporter.sources.serving.signals import SIGNALS

START_FAMILY = "process_start_time_seconds"
"""Read next to any table: its change is an engine restart."""

VLLM_TTFT = "vllm:time_to_first_token_seconds"
SGLANG_TTFT = "sglang:time_to_first_token_seconds"


@dataclass(frozen=True)
class Rule:
    """Where one signal lives: the sum of ``families`` (all present ones), read from
    samples named family + ``suffix`` whose labels include ``match`` (a label may allow
    several values), times ``scale``. ``live`` is false for counters that move only when a
    request ends, so a rate lags by a request's duration. ``times`` names a family whose
    same-labelled sample multiplies each value (llama.cpp's decode calls times busy slots
    per call); the rule applies only when that family is present too, and the product is
    ``derived``: rounding in the text lets it dip a little, which is not a restart. The
    product counts whole things, so it is rounded to an integer (exact while the printed
    average's error times the count stays under a half).
    ``minus`` names another signal whose growth (same model and GPU) is taken off
    this one's: an engine whose prompt count includes cache hits, less its hits, gives the
    prompt tokens it computed. Growths are subtracted, not values, so each raw counter
    keeps its own reset detection and the difference never fakes a restart."""

    families: tuple[str, ...]
    suffix: str = ""
    match: tuple[tuple[str, tuple[str, ...]], ...] = ()
    scale: float = 1.0
    live: bool = True
    times: str = ""
    minus: str = ""
    rises: bool = False
    """A gauge standing in for a counter: only its rises between scrapes count, and a fall
    is not a restart (SGLang 0.5's ``num_retracted_reqs``)."""
    plus: str = ""
    """A counter family whose same-labelled value is added to a ``times`` product (the
    tokens llama.cpp's speculative decoding accepted: one decode call yields them beyond
    the one token per busy slot). Absent from a build, it adds nothing."""
    settle: str = ""
    """The engine's own exact count of the same thing, moving only when a request ends:
    while ``idle`` says nothing is in flight the published total settles on it (see
    ``adapter.Settler``)."""
    idle: str = ""
    """A gauge family that reads 0 when the engine has nothing in flight."""

    @property
    def derived(self) -> bool:
        return bool(self.times)


def r(
    *families: str,
    suffix: str = "",
    scale: float = 1.0,
    live: bool = True,
    times: str = "",
    minus: str = "",
    rises: bool = False,
    plus: str = "",
    settle: str = "",
    idle: str = "",
    **match: str | tuple[str, ...],
) -> Rule:
    """Short constructor so tables read like tables; a ``match`` value "" allows the label
    to be absent."""
    pairs = tuple(sorted((k, v if isinstance(v, tuple) else (v,)) for k, v in match.items()))
    return Rule(
        tuple(families), suffix, pairs, scale, live, times, minus, rises, plus,
        settle, idle,
    )  # fmt: skip


@dataclass(frozen=True)
class EngineTable:
    """Aliases of one engine version.

    ``requires``: name prefixes that must all occur among the families for the table to be
    a candidate; ``model_labels``: labels naming the model, first present wins;
    ``gpu_label``: a label naming the GPU UUID a series belongs to (Triton); ``markers``:
    families that only this version has, counted when scoring candidates; ``ttft``: its
    time-to-first-token histogram, if it has one (see the field).
    """

    engine: str
    version: str
    requires: tuple[str, ...]
    signals: dict[str, tuple[Rule, ...]]
    model_labels: tuple[str, ...] = ("model_name",)
    gpu_label: str = ""
    markers: tuple[str, ...] = ()
    default_path: str = "/metrics"
    notes: str = ""
    ttft: str = ""
    """Its time-to-first-token histogram family, labelled by model (``model_name``): the
    serving dashboard's recording rule sums it per model (mixin/rules.py reads
    :func:`ttft_histograms`). A marker too; never parsed here: Prometheus scrapes it from
    the engine pods."""

    def families(self) -> frozenset[str]:
        names = {f for rules in self.signals.values() for rule in rules for f in rule.families}
        return frozenset(names | set(self.markers) | ({self.ttft} if self.ttft else set()))

    def reads(self) -> frozenset[str]:
        """Every family reading this table can look at (signals, multipliers, markers, the
        start time): the only ones worth parsing (see ``exposition.select``)."""
        extra = {
            name
            for rules in self.signals.values()
            for rule in rules
            for name in (rule.times, rule.plus, rule.settle, rule.idle)
            if name
        }
        return self.families() | extra | {START_FAMILY}

    def needs(self, present: Set[str]) -> frozenset[str]:
        """The families a reading of this table uses when ``present`` are in the body:
        each signal's first applicable alternative (markers only served detection). A
        table naming GPUs per series looks at every family it reads."""
        if self.gpu_label:
            return self.reads()
        names = {START_FAMILY}
        for rules in self.signals.values():
            for rule in rules:
                if any(f in present for f in rule.families) and (
                    not rule.times or rule.times in present
                ):
                    names.update(rule.families)
                    names.update(x for x in (rule.times, rule.plus, rule.settle, rule.idle) if x)
                    break
        return frozenset(names)


def _alts(**signals: Rule | tuple[Rule, ...]) -> dict[str, tuple[Rule, ...]]:
    """A table's rules by signal; a name :data:`SIGNALS` does not declare fails at import."""
    unknown = set(signals) - set(SIGNALS)
    if unknown:
        raise ValueError(f"signals not declared in signals.py: {sorted(unknown)}")
    return {k: rules if isinstance(rules, tuple) else (rules,) for k, rules in signals.items()}


_VLLM_V1_OUTCOMES = (
    "vllm:request_success",
    VLLM_TTFT,
    "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds",
)
"""Request outcomes and latency histograms: recognise vLLM V1, never parsed."""

VLLM_V1 = EngineTable(
    engine="vllm",
    version="v1",
    requires=("vllm:",),
    model_labels=("model_name", "model"),
    signals=_alts(
        # prompt_tokens counts every prompt token scheduled, cache hits included.
        prompt_tokens=(
            r("vllm:prompt_tokens_by_source", source="local_compute"),
            r("vllm:prompt_tokens", minus="prompt_cached_tokens"),
        ),
        prompt_cached_tokens=(
            r("vllm:prompt_tokens_by_source", source="local_cache_hit"),
            r("vllm:prompt_tokens_cached"),
            r("vllm:prefix_cache_hits"),
        ),
        generation_tokens=r("vllm:generation_tokens"),
        requests_running=r("vllm:num_requests_running"),
        requests_waiting=r("vllm:num_requests_waiting"),
        kv_cache_usage=(r("vllm:kv_cache_usage_perc"), r("vllm:gpu_cache_usage_perc")),
        preemptions=r("vllm:num_preemptions"),
        flops_per_gpu=r("vllm:estimated_flops_per_gpu"),
    ),
    markers=(
        *_VLLM_V1_OUTCOMES,
        "vllm:kv_cache_usage_perc",
        "vllm:engine_sleep_state",
        "vllm:prefix_cache_queries",
        "vllm:gpu_prefix_cache_queries",
        "vllm:request_prefill_kv_computed_tokens",
        "vllm:request_inference_time_seconds",
    ),
    notes="tokens counted per engine step (live); engine label = data-parallel rank",
    ttft=VLLM_TTFT,
)

VLLM_V0 = EngineTable(
    engine="vllm",
    version="v0",
    requires=("vllm:",),
    model_labels=("model_name", "model"),
    signals=_alts(
        prompt_tokens=r("vllm:prompt_tokens"),
        generation_tokens=r("vllm:generation_tokens"),
        requests_running=r("vllm:num_requests_running"),
        requests_waiting=r("vllm:num_requests_waiting"),
        kv_cache_usage=r("vllm:gpu_cache_usage_perc"),
        preemptions=r("vllm:num_preemptions"),
    ),
    markers=(
        "vllm:request_success",
        VLLM_TTFT,
        "vllm:time_per_output_token_seconds",
        "vllm:num_requests_swapped",
        "vllm:cpu_cache_usage_perc",
        "vllm:avg_generation_throughput_toks_per_s",
        "vllm:avg_prompt_throughput_toks_per_s",
        "vllm:gpu_prefix_cache_hit_rate",
        "vllm:cpu_prefix_cache_hit_rate",
    ),
    notes="tokens counted per engine step (live)",
    ttft=VLLM_TTFT,
)


def _reprefixed(table: EngineTable, engine: str, old: str, new: str) -> EngineTable:
    """The same aliases under another prefix (Ray Serve re-exporting vLLM)."""

    def rename(name: str) -> str:
        return (
            new + name.removeprefix(old).replace(":", "_")
            if new.endswith("_")
            else (new + name.removeprefix(old))
        )

    signals = {
        key: tuple(replace(x, families=tuple(rename(f) for f in x.families)) for x in rules)
        for key, rules in table.signals.items()
    }
    return replace(
        table,
        engine=engine,
        requires=(new,),
        signals=signals,
        markers=tuple(rename(m) for m in table.markers),
        ttft="",  # recognised by its renamed markers; the TTFT rule reads the engine's own
        notes=f"vLLM {table.version} re-exported by Ray Serve as {new}*",
    )


RAY_VLLM_V1 = _reprefixed(VLLM_V1, "ray-vllm", "vllm:", "ray_vllm:")
RAY_VLLM_V0 = _reprefixed(VLLM_V0, "ray-vllm", "vllm:", "ray_vllm:")
RAY_VLLM_V1_OTEL = replace(
    _reprefixed(VLLM_V1, "ray-vllm", "vllm:", "ray_vllm_"), version="v1-otel"
)

SGLANG = EngineTable(
    engine="sglang",
    version="0.3+",
    requires=("sglang:",),
    model_labels=("model_name", "name"),
    signals=_alts(
        prompt_tokens=(
            r("sglang:realtime_tokens", mode="prefill_compute"),
            # prompt_tokens_total includes cached tokens: less cached_tokens_total
            r("sglang:prompt_tokens", live=False, minus="prompt_cached_tokens"),
        ),
        prompt_cached_tokens=(
            r("sglang:realtime_tokens", mode="prefill_cache"),
            r("sglang:cached_tokens", live=False, cache_source=("total", "")),
        ),
        generation_tokens=(
            r("sglang:generation_tokens", live=False),
            r("sglang:realtime_tokens", mode="decode"),
        ),
        requests_running=(r("sglang:num_running_reqs"), r("sglang:num_requests_running")),
        requests_waiting=(r("sglang:num_queue_reqs"), r("sglang:num_requests_waiting")),
        kv_cache_usage=r("sglang:token_usage"),
        preemptions=(
            r("sglang:num_retracted_requests"),
            r("sglang:num_retracted_reqs", rises=True),  # 0.5: a gauge only
        ),
        busy_seconds=r("sglang:forward_execution_seconds"),
        flops_per_gpu=r("sglang:estimated_flops_per_gpu"),
    ),
    markers=(
        "sglang:gen_throughput",
        "sglang:cache_hit_rate",
        "sglang:max_total_num_tokens",
        "sglang:num_requests",
        "sglang:num_aborted_requests",
        SGLANG_TTFT,
        "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds",
    ),
    notes="generation from generation_tokens (request end) when present, else realtime "
    "decode; prompt from realtime prefill_compute (live); metrics need --enable-metrics",
    ttft=SGLANG_TTFT,
)

TGI = EngineTable(
    engine="tgi",
    version="1+",
    requires=("tgi_",),
    model_labels=(),
    signals=_alts(
        prompt_tokens=r("tgi_request_input_length", suffix="_sum", live=False),
        generation_tokens=r("tgi_request_generated_tokens", suffix="_sum", live=False),
        requests_running=r("tgi_batch_current_size"),
        requests_waiting=r("tgi_queue_size"),
        busy_seconds=r("tgi_batch_forward_duration", suffix="_sum"),
    ),
    markers=(
        "tgi_request_count",
        "tgi_batch_current_max_tokens",
        "tgi_request_success",
        "tgi_request_failure",
    ),
    notes="counters have no _total; token histograms move at request end; no model label",
)

_TRITON_CORE = _alts(
    requests_waiting=r("nv_inference_pending_request_count"),
    busy_seconds=r("nv_inference_compute_infer_duration_us", scale=1e-6),
)
_TRITON_OUTCOMES = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_first_response_histogram_ms",
)

TRITON = EngineTable(
    engine="triton",
    version="23+",
    requires=("nv_",),
    model_labels=("model",),
    gpu_label="gpu_uuid",
    signals={
        **_TRITON_CORE,
        **_alts(
            prompt_tokens=r("nv_llm_input_token_len", suffix="_sum", live=False),
            generation_tokens=r("nv_llm_output_token_len", suffix="_sum", live=False),
            requests_running=r("nv_trt_llm_request_metrics", request_type="active"),
            requests_waiting=(
                r("nv_trt_llm_request_metrics", request_type="waiting"),
                r("nv_inference_pending_request_count"),
            ),
            kv_cache_usage=r("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="fraction"),
        ),
    },
    markers=(
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_trt_llm_general_metrics",
        *_TRITON_OUTCOMES,
    ),
    notes="TensorRT-LLM backend token histograms move at request end; core counters stay 0 "
    "for decoupled models",
)

TRITON_VLLM = EngineTable(
    engine="triton-vllm",
    version="24+",
    requires=("nv_", "vllm:"),
    model_labels=("model", "model_name"),
    gpu_label="gpu_uuid",
    signals={**_TRITON_CORE, **VLLM_V1.signals},
    # vLLM's outcome families stand for Triton's success and first-response ones.
    markers=("nv_inference_count", "nv_inference_request_failure", *_VLLM_V1_OUTCOMES),
    notes="vLLM backend families (REPORT_CUSTOM_METRICS) next to Triton core ones",
)

TRTLLM_SERVE = EngineTable(
    engine="trtllm-serve",
    version="1.0+",
    requires=("trtllm_",),
    default_path="/prometheus/metrics",
    signals=_alts(
        prompt_tokens=r("trtllm_prompt_tokens"),
        generation_tokens=r("trtllm_generation_tokens"),
        requests_running=r("trtllm_num_requests_running"),
        requests_waiting=r("trtllm_num_requests_waiting"),
        kv_cache_usage=r("trtllm_kv_cache_utilization"),
    ),
    markers=(
        "trtllm_e2e_request_latency_seconds",
        "trtllm_kv_cache_hit_rate",
        "trtllm_request_success",
        "trtllm_time_to_first_token_seconds",
        "trtllm_time_per_output_token_seconds",
    ),
    notes="served at /prometheus/metrics; token counters unverified upstream",
)

TRTLLM_SERVE_EARLY = EngineTable(
    engine="trtllm-serve",
    version="0.21-unprefixed",
    requires=(),
    default_path="/prometheus/metrics",
    signals={},
    markers=(
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
        "request_success",
        "time_to_first_token_seconds",
        "time_per_output_token_seconds",
    ),
    notes="first /prometheus/metrics version: five unprefixed request families, no tokens",
)

NIM = EngineTable(
    engine="nim",
    version="1.x",
    requires=(),
    signals=_alts(
        prompt_tokens=r("prompt_tokens"),
        generation_tokens=r("generation_tokens"),
        requests_running=r("num_requests_running"),
        requests_waiting=r("num_requests_waiting"),
        kv_cache_usage=r("gpu_cache_usage_perc"),
        preemptions=r("num_preemptions"),
    ),
    markers=(
        "num_request_max",
        "request_finish",
        "e2e_request_latency_seconds",
        "request_success",
        "request_failure",
        "time_to_first_token_seconds",
        "time_per_output_token_seconds",
    ),
    notes="TensorRT-LLM based NIM: unprefixed names (vLLM-based NIMs expose vllm:*)",
)

LLAMACPP = EngineTable(
    engine="llama.cpp",
    version="b3000+",
    requires=("llamacpp:",),
    model_labels=(),
    signals=_alts(
        prompt_tokens=r("llamacpp:prompt_tokens"),  # evaluated tokens: reused cache excluded
        prompt_cached_tokens=r("llamacpp:prompt_tokens_cached"),
        generation_tokens=(
            # Busy slots summed over decode calls: one token per generating slot per call,
            # counted as it happens, plus the draft tokens speculative decoding accepted
            # (added when a request ends). tokens_predicted moves only when a request
            # ends but is exact: with nothing processing, the total settles on it.
            r(
                "llamacpp:n_decode",
                times="llamacpp:n_busy_slots_per_decode",
                plus="llamacpp:spec_decode_num_accepted_tokens",
                settle="llamacpp:tokens_predicted",
                idle="llamacpp:requests_processing",
            ),
            r("llamacpp:tokens_predicted", live=False),
        ),
        requests_running=r("llamacpp:requests_processing"),
        requests_waiting=r("llamacpp:requests_deferred"),
        kv_cache_usage=r("llamacpp:kv_cache_usage_ratio"),
        # No busy_seconds: prompt_seconds and tokens_predicted_seconds are summed per slot
        # and added when a request ends, so with parallel slots they exceed wall time.
    ),
    markers=("llamacpp:n_decode", "llamacpp:n_busy_slots_per_decode"),
    notes="needs --metrics; no labels; generation live from n_decode x busy slots per decode "
    "+ accepted draft tokens, settling on tokens_predicted when idle",
)

LMDEPLOY = EngineTable(
    engine="lmdeploy",
    version="0.9+",
    requires=("lmdeploy:",),
    signals=_alts(
        prompt_tokens=r("lmdeploy:prompt_tokens"),
        generation_tokens=r("lmdeploy:generation_tokens"),
        requests_running=r("lmdeploy:num_requests_running"),
        requests_waiting=r("lmdeploy:num_requests_waiting"),
        kv_cache_usage=r("lmdeploy:gpu_cache_usage_perc"),
    ),
    markers=(
        "lmdeploy:request_success",
        "lmdeploy:time_to_first_token_seconds",
        "lmdeploy:time_per_output_token_seconds",
    ),
    notes="tokens counted per iteration (live)",
)

TABLES: tuple[EngineTable, ...] = (
    TRITON_VLLM,
    VLLM_V1,
    VLLM_V0,
    RAY_VLLM_V1,
    RAY_VLLM_V0,
    RAY_VLLM_V1_OTEL,
    SGLANG,
    TGI,
    TRITON,
    TRTLLM_SERVE,
    LLAMACPP,
    LMDEPLOY,
    NIM,
    TRTLLM_SERVE_EARLY,
)
"""Candidates in order of preference when two score the same."""

ENGINE_NAMES: frozenset[str] = frozenset(t.engine for t in TABLES)


def default_path(engine: str) -> str:
    """Where an engine serves Prometheus text (trtllm-serve's ``/metrics`` is JSON)."""
    return next((t.default_path for t in TABLES if t.engine == engine), "/metrics")


def ttft_histograms() -> tuple[str, ...]:
    """Every table's time-to-first-token histogram (:attr:`EngineTable.ttft`), each once:
    what the serving dashboard's recording rule sums per model."""
    return tuple(dict.fromkeys(table.ttft for table in TABLES if table.ttft))
