"""Metric families the serving source publishes (see docs/serving.md)."""

from __future__ import annotations

from exporter.metrics.catalog import define

SOURCE = "serving"

TOKENS = define(
    "goodput_gpu_tokens_total",
    "counter",
    "Tokens an inference engine processed (kind=prompt) or generated (kind=generation), "
    "attributed to this GPU; an engine on several GPUs has its tokens split evenly.",
    labels=("kind", "model", "engine"),
    source=SOURCE,
)
REQUESTS = define(
    "goodput_gpu_serving_requests",
    "gauge",
    "Requests the engine(s) on this GPU are running or keep waiting; every GPU of a "
    "tensor-parallel engine shows the engine's whole count.",
    labels=("state", "model", "engine"),
    source=SOURCE,
)
KV_CACHE = define(
    "goodput_gpu_kv_cache_usage_ratio",
    "gauge",
    "Share of the engine's KV-cache blocks in use (0-1).",
    unit="ratio",
    labels=("model", "engine"),
    source=SOURCE,
)
FLOPS = define(
    "goodput_gpu_serving_flops_total",
    "counter",
    "Floating-point operations the engine estimates it ran on this GPU (vLLM/SGLang "
    "--enable-mfu-metrics).",
    labels=("model", "engine"),
    source=SOURCE,
)
PREEMPTIONS = define(
    "goodput_gpu_serving_preemptions_total",
    "counter",
    "Requests the engine preempted (SGLang: retracted), split evenly across its GPUs.",
    labels=("model", "engine"),
    source=SOURCE,
)
BUSY = define(
    "goodput_gpu_serving_busy_seconds_total",
    "counter",
    "Seconds the engine reports running forward passes (SGLang, TGI, llama.cpp, Triton "
    "compute); every GPU of the engine gets the whole time.",
    unit="seconds",
    labels=("model", "engine"),
    source=SOURCE,
)
TARGET_UP = define(
    "goodput_serving_target_up",
    "gauge",
    "1 if the last scrape of a serving target succeeded and its engine was recognised.",
    labels=("target", "engine", "model"),
    scope="node",
    source=SOURCE,
)
SCRAPE_DURATION = define(
    "goodput_serving_scrape_duration_seconds",
    "gauge",
    "Time the last scrape of a serving target took, including a failed one.",
    unit="seconds",
    labels=("target",),
    scope="node",
    source=SOURCE,
)
TARGET_ERROR = define(
    "goodput_serving_target_error_info",
    "gauge",
    "1 while the last scrape of a target failed; reason is timeout, connection_refused, "
    "http_<status>, body_too_large, bad_encoding, parse_error, unknown_engine, bad_url, "
    "bad_annotation, http_error or internal_error.",
    labels=("target", "reason"),
    scope="node",
    source=SOURCE,
)
TARGET_GPUS = define(
    "goodput_serving_target_gpus",
    "gauge",
    "Number of GPUs a target's work is attributed to, and by which rule (explicit, "
    "engine_label, pod, process; none with 0 when no rule matched).",
    labels=("target", "via"),
    scope="node",
    source=SOURCE,
)
DISCOVERY_UP = define(
    "goodput_serving_discovery_up",
    "gauge",
    "1 while the watch of this node's pods for serving annotations works; 0 with reason "
    "(api_error, http_<status>, starting, no_config) otherwise.",
    labels=("reason",),
    scope="node",
    source=SOURCE,
)

COUNTER_FAMILIES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "prompt_tokens": (TOKENS, (("kind", "prompt"),)),
    "generation_tokens": (TOKENS, (("kind", "generation"),)),
    "flops_per_gpu": (FLOPS, ()),
    "preemptions": (PREEMPTIONS, ()),
    "busy_seconds": (BUSY, ()),
}
"""Normalised counter signal -> published family and its fixed labels."""

GAUGE_FAMILIES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "requests_running": (REQUESTS, (("state", "running"),)),
    "requests_waiting": (REQUESTS, (("state", "waiting"),)),
    "kv_cache_usage": (KV_CACHE, ()),
}
