"""Alerts about the exporter itself and what it reads: profiling, scrapes, sources, engines."""

from __future__ import annotations

from typing import Any

from mixin import names as N
from mixin.alerts.common import (
    GPU_MATCH,
    AlertBuilder,
    AlertCtx,
    human,
    query_args,
    query_value,
)


def profiling_unavailable(c: AlertCtx) -> dict[str, Any]:
    avail = c.q.s("goodput_gpu_profiling_available")
    return c.alert(
        "GPUProfilingUnavailable",
        f"max by ({c.q.gpu_by}, source, reason) ({avail}) == 0\n"
        f"unless on ({c.q.gpu_key}) (max by ({c.q.gpu_by}) ({avail}) == 1)",
        "No profiling counters for GPU {{ $labels.gpu }} on {{ $labels.node }}",
        "Profiling source {{ $labels.source }} is unavailable for GPU {{ $labels.gpu }} on "
        "{{ $labels.node }} (reason: {{ $labels.reason }}) and no other source provides "
        "SM activity: busy-but-unproductive cannot be detected on it.")


def profiling_stale(c: AlertCtx) -> dict[str, Any]:
    name = "GPUProfilingStale"
    util = query_value(f"{N.GPU_UTILIZATION}{GPU_MATCH}", "humanizePercentage")
    return c.alert(
        name, f"min by ({c.q.gpu_by}) ({c.q.s('goodput_gpu_profiling_stale')}) == 1",
        "Profiling counters of GPU {{ $labels.gpu }} on {{ $labels.node }} are stale",
        c.text("The exporter marked the profiling counters of GPU {{ $labels.gpu }} on "
               "{{ $labels.node }} stale (silent zeros while the GPU is busy, or too old) for "
               "${held}; its SM activity, tensor activity and regime cannot be trusted. "
               "Kernel-time utilisation is ${util}.", held=c.held(name), util=util))


def exporter_down(c: AlertCtx) -> dict[str, Any]:
    """The node label comes from the rule names.EXPORTER_NODE, which remembers each target's
    node for as long as the target exists, however long it has been down; a target that never
    came up keeps the node label of `up` if the scrape config sets one. Exporter pod labels
    (namespace, pod) stay out: they would route the alert to the monitoring namespace's
    team."""
    name, node = "GoodputExporterDown", c.cfg.labels.node
    target, up = f"{c.q.target}, instance", f"(up{{{c.cfg.selector}}} == 0)"
    expr = (f"max by ({target}, {node}) (\n"
            f"  {up}\n    * on ({target}) group_left ({node})\n"
            f"    {c.rec(N.EXPORTER_NODE)}\n  or on ({target})\n  {up}\n)")
    return c.alert(
        name, expr,
        "gpu-goodput-exporter {{ $labels.instance }}{{ with $labels.node }} on {{ . }}{{ end }} "
        "is down",
        c.text("Prometheus failed to scrape {{ $labels.instance }} (job {{ $labels.job }}) for "
               "${held}: no GPU health, efficiency or hardware alert can fire for "
               "{{ with $labels.node }}node {{ . }}{{ else }}its node{{ end }}.",
               held=c.held(name)))


def exporter_stale(c: AlertCtx) -> dict[str, Any]:
    name = "GoodputExporterStale"
    last = c.q.s("goodput_exporter_last_success_timestamp_seconds")
    return c.alert(
        name,
        f"time() - max by ({c.q.node_by}, source) ({last}) > {c.th(name, 'max_age_seconds')}",
        "Source {{ $labels.source }} of the exporter on {{ $labels.node }} has not succeeded "
        "for {{ $value | humanizeDuration }}",
        "The exporter on {{ $labels.node }} still answers scrapes, but its "
        "{{ $labels.source }} source last succeeded {{ $value | humanizeDuration }} ago: "
        "the metrics it serves from that source are frozen.")


def exporter_source_errors(c: AlertCtx) -> dict[str, Any]:
    name, window = "GoodputExporterSourceErrors", c.cfg.windows.source_errors
    errors = c.q.increase("goodput_exporter_source_errors_total", window)
    return c.alert(
        name, f"sum by ({c.q.node_by}, source) {errors}"
        f" >= {c.th(name, 'min_errors')}",
        "Source {{ $labels.source }} of the exporter on {{ $labels.node }} keeps failing",
        c.text("The {{ $labels.source }} source of the exporter on {{ $labels.node }} failed "
               '{{ $value | printf "%.0f" }} times in ${window}, for ${held}; see the `reason` '
               "label of goodput_exporter_source_errors_total.",
               window=human(window), held=c.held(name)))


def serving_target_down(c: AlertCtx) -> dict[str, Any]:
    """Down as long as no exporter pod of the node reaches it."""
    name, up = "ServingTargetDown", c.q.s("goodput_serving_target_up")
    reason = ('{{ with printf "goodput_serving_target_error_info{CLUSTER=%q,NODE=%q,'
              'target=%q}" ' + query_args("cluster", "node", "target") + ' | query }}'
              "reason: {{ (. | first).Labels.reason }}{{ else }}no reason reported{{ end }}")
    return c.alert(
        name, f"max by ({c.q.node_by}, target, engine, model) ({up}) == 0",
        "Serving engine {{ $labels.target }} on {{ $labels.node }} cannot be scraped",
        c.text("The exporter on {{ $labels.node }} failed to scrape the {{ $labels.engine }} "
               "engine at {{ $labels.target }} ({{ $labels.model }}) for ${held} (${reason}): "
               "tokens, queue and KV cache of its GPUs are unknown.",
               held=c.held(name), reason=reason))


EXPORTER: list[AlertBuilder] = [profiling_unavailable, profiling_stale, exporter_down,
                                exporter_stale, exporter_source_errors, serving_target_down]
