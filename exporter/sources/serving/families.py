"""Serving families: engine signals attributed to GPUs, and the health of each target."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exporter.metrics.families import Family, GpuFamilies, NodeFamilies, Row
from exporter.readings import ServedModel, ServingState, TargetStatus
from exporter.snapshot import Snapshot
from exporter.sources.serving.signals import (
    BUSY_SECONDS,
    FLOPS,
    KV_CACHE_USAGE,
    PREEMPTIONS,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    Signal,
)

COLLECTOR = "serving"


def _state(snap: Snapshot) -> ServingState:
    return snap.get(ServingState) or ServingState()


def _per_gpu(snap: Snapshot) -> Mapping[str, tuple[ServedModel, ...]]:
    return _state(snap).gpus


def _tokens(models: tuple[ServedModel, ...]) -> Iterable[Row]:
    for m in models:
        for kind, total in m.tokens:
            yield (kind, m.model, m.engine), total


def _field(signal: Signal):  # type: ignore[no-untyped-def]
    def rows(models: tuple[ServedModel, ...]) -> Iterable[Row]:
        for m in models:
            value = getattr(m, signal.served_as)
            if value is not None:
                yield (m.model, m.engine), float(value)

    return rows


def _requests(models: tuple[ServedModel, ...]) -> Iterable[Row]:
    for m in models:
        for state, signal in (("running", REQUESTS_RUNNING), ("waiting", REQUESTS_WAITING)):
            value = getattr(m, signal.served_as)
            if value is not None:
                yield (state, m.model, m.engine), value


GPU = GpuFamilies[tuple[ServedModel, ...]](
    COLLECTOR,
    _per_gpu,
    (
        Family(
            "goodput_gpu_tokens_total",
            "counter",
            "Tokens an inference engine processed or generated, attributed to this GPU, by "
            "kind: prompt (prompt tokens computed), prompt_cached (prompt tokens served from "
            "the prefix cache), generation; an engine on several GPUs has its tokens split "
            "evenly.",
            _tokens,
            labels=("kind", "model", "engine"),
        ),
        Family(
            "goodput_gpu_serving_requests",
            "gauge",
            "Requests the engine(s) on this GPU are running or keep waiting; every GPU of a "
            "tensor-parallel engine shows the engine's whole count.",
            _requests,
            labels=("state", "model", "engine"),
        ),
        Family(
            "goodput_gpu_kv_cache_usage_ratio",
            "gauge",
            "Share of the engine's KV-cache blocks in use (0-1).",
            _field(KV_CACHE_USAGE),
            labels=("model", "engine"),
            unit="ratio",
        ),
        Family(
            "goodput_gpu_serving_flops_total",
            "counter",
            "Floating-point operations the engine estimates it ran on this GPU (vLLM/SGLang "
            "--enable-mfu-metrics).",
            _field(FLOPS),
            labels=("model", "engine"),
        ),
        Family(
            "goodput_gpu_serving_preemptions_total",
            "counter",
            "Requests the engine preempted (SGLang: retracted), split evenly across its GPUs.",
            _field(PREEMPTIONS),
            labels=("model", "engine"),
        ),
        Family(
            "goodput_gpu_serving_busy_seconds_total",
            "counter",
            "Seconds the engine reports running forward passes (SGLang, TGI, Triton compute); "
            "every GPU of the engine gets the whole time.",
            _field(BUSY_SECONDS),
            labels=("model", "engine"),
            unit="seconds",
        ),
    ),
)


def _targets(state: ServingState) -> tuple[TargetStatus, ...]:
    return state.targets


def _up(state: ServingState) -> Iterable[Row]:
    return (((t.target, t.engine, t.model), 1.0 if t.up else 0.0) for t in state.targets)


def _duration(state: ServingState) -> Iterable[Row]:
    return (((t.target,), t.scrape_seconds) for t in state.targets)


def _waits(state: ServingState) -> Iterable[Row]:
    return (((t.target,), t.wait_seconds) for t in state.targets)


def _errors(state: ServingState) -> Iterable[Row]:
    return (((t.target, t.reason), 1.0) for t in state.targets if not t.up)


def _dropped(state: ServingState) -> Iterable[Row]:
    return (((t.target, reason), n) for t in state.targets for reason, n in t.dropped)


def _targets_dropped(state: ServingState) -> Iterable[Row]:
    return (((reason,), float(n)) for reason, n in state.targets_dropped)


def _gpus(state: ServingState) -> Iterable[Row]:
    return (((t.target, t.via), float(len(t.gpus))) for t in state.targets)


def _discovery(state: ServingState) -> Iterable[Row]:
    if state.discovery is None:
        return ()
    ok, reason = state.discovery
    return (((reason,), 1.0 if ok else 0.0),)


NODE = NodeFamilies[ServingState](
    COLLECTOR,
    lambda snap: (lambda s: s if (s.targets or s.discovery) else None)(_state(snap)),
    (
        Family(
            "goodput_serving_target_up",
            "gauge",
            "1 if the last scrape of a serving target succeeded and its engine was recognised.",
            _up,
            labels=("target", "engine", "model"),
        ),
        Family(
            "goodput_serving_scrape_duration_seconds",
            "gauge",
            "Time the last scrape of a serving target took, including a failed one.",
            _duration,
            labels=("target",),
            unit="seconds",
        ),
        Family(
            "goodput_serving_scrape_wait_seconds",
            "gauge",
            "Time the last scrape of a serving target waited for a scrape slot before it "
            "started (not part of goodput_serving_scrape_duration_seconds): slots go to "
            "the tenant (namespace) that used least of them, so a tenant whose pods are "
            "slow or hung waits, not the others.",
            _waits,
            labels=("target",),
            unit="seconds",
        ),
        Family(
            "goodput_serving_target_error_info",
            "gauge",
            "1 while the last scrape of a target failed; reason is timeout, "
            "connection_refused, unauthorized, tls_error, credentials_unreadable, "
            "tls_config_unreadable, http_<status>, body_too_large, bad_encoding, parse_error, "
            "unknown_engine, bad_url, bad_annotation, http_error, slow_share_full (cut at "
            "half a round: the slots long scrapes may hold were held by tenants that used "
            "less), preempted (cut so that a tenant that used less of the slots could run) "
            "or internal_error.",
            _errors,
            labels=("target", "reason"),
        ),
        Family(
            "goodput_serving_target_dropped_values_total",
            "counter",
            "Engine values refused or altered instead of republished as read, by reason: "
            "non_finite (NaN, +Inf, -Inf) or negative (no engine signal can be either), "
            "implausible (growth above serving.max_tokens_per_second_per_gpu or another "
            "physical ceiling), max_models (a model name past "
            "serving.max_models_per_target), max_series (engine series past the per-target "
            "bound), label_too_long (a model name cut to serving.max_label_length), "
            "new_series (the part of a series' first value, first seen after the target's "
            "first reading, beyond what the engine's total of that signal grew: model-name "
            "churn), gpus_refused (a scrape whose GPU claim named a GPU "
            "the kubelet did not assign to the pod).",
            _dropped,
            labels=("target", "reason"),
        ),
        Family(
            "goodput_serving_target_gpus",
            "gauge",
            "Number of GPUs a target's work is attributed to, and by which rule (explicit, "
            "engine_label, pod, process; none with 0 when no rule matched).",
            _gpus,
            labels=("target", "via"),
        ),
        Family(
            "goodput_serving_targets_dropped",
            "gauge",
            "Discovered serving targets not scraped now, by reason: duplicate (the same "
            "target label as another target), max_targets (past serving.max_targets), "
            "max_targets_per_namespace (past serving.max_targets_per_namespace in its "
            "namespace) or bad_pod (a pod that could not be read at all).",
            _targets_dropped,
            labels=("reason",),
        ),
        Family(
            "goodput_serving_scrapes_limited_total",
            "counter",
            "Serving scrapes delayed or dropped by a limit, by reason: slow_share_full (cut "
            "at half a round: the slots long scrapes may hold, half of "
            "serving.max_concurrency, were held by tenants that used less), preempted (a "
            "long scrape cut so that a tenant that used less of the slots could run), "
            "queued (still waiting for a slot when its next round came: the target missed "
            "a round) or max_targets (a discovered target not scraped this round: its "
            "place under serving.max_targets went to another namespace in turn).",
            lambda state: (((reason,), float(n)) for reason, n in state.scrapes_limited),
            labels=("reason",),
        ),
        Family(
            "goodput_serving_discovery_up",
            "gauge",
            "1 while the watch of this node's pods for serving annotations works; 0 with "
            "reason (api_error, http_<status>, starting, no_config) otherwise.",
            _discovery,
            labels=("reason",),
        ),
    ),
)
