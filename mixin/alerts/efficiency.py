"""Efficiency alerts: a GPU busy without doing work, busy without output, held but idle,
waiting on its host; a job's straggler; a GPU far below the fleet for its model."""

from __future__ import annotations

from typing import Any

from exporter.model.regimes import ALL as REGIMES
from mixin import names as N
from mixin.alerts.common import GPU_MATCH, AlertBuilder, AlertCtx, query_args, query_value
from mixin.rules import job_waiting_share, straggler_gap
from mixin.templates import fill

MOVING = tuple(r.name for r in REGIMES if r.moves_data)
"""Regimes whose hollow kernel time is data moving (exporter/model/regimes.py)."""


def busy_but_unproductive(c: AlertCtx) -> dict[str, Any]:
    """Copies (transfer_bound) and ranks waiting in collectives (comm_wait) also show kernel
    time without SM work, but they are the job's transfers, not hollow kernels: the regimes
    that declare so (``Regime.moves_data``) are left out."""
    name, util, gpu_key = "GPUBusyButUnproductive", c.rec(N.GPU_UTILIZATION), c.q.gpu_key
    moving = c.rec(N.GPU_REGIME, f'regime=~"{"|".join(MOVING)}"')
    expr = (f"{util} >= {c.th(name, 'min_utilization')}\n  and on ({gpu_key})\n"
            f"  {c.q.sm_active_ratio()} < {c.th(name, 'max_sm_share')} * {util}\n"
            f"  unless on ({gpu_key})\n  ({moving} > 0.5)")
    sm_share = query_value(f"{N.GPU_SM_ACTIVE}{GPU_MATCH} / {N.GPU_PROFILED}{GPU_MATCH}",
                           "humanizePercentage", selectors=2)
    return c.alert(
        name, c.q.with_pods(expr),
        "GPU {{ $labels.gpu }} on {{ $labels.node }} looks busy but its SMs are nearly idle",
        c.text("GPU {{ $labels.gpu }} on {{ $labels.node }}${pod} had a kernel running "
               "{{ $value | humanizePercentage }} of the time over ${rate}, but its SMs were "
               "active only ${sm} of the time: utilisation is hollow (tiny kernels, launch or "
               "sync bound).", sm=sm_share))


def holder_busy_but_unproductive(c: AlertCtx) -> dict[str, Any]:
    """The pod (or process) on a GPU that several share whose own share is hollow or makes no
    tokens: the exporter's model judges each holder in its own frame (its kernel time and
    the GPU's SM activity apportioned to it), so the alert names the holder, never a copy of
    the GPU's value for every pod on it."""
    name, lb = "GPUHolderBusyButUnproductive", c.cfg.labels
    pod = lb.pod
    flag = c.q.s("goodput_gpu_holder_busy_unproductive")
    # One result per holder, whichever exporter pod reported it (a rollover), any reason.
    expr = c.q.per_gpu("max", flag, lb.namespace, lb.pod, lb.container, "pid") + " == 1"
    query = ("goodput_gpu_holder_kernel_time_ratio{CLUSTER=%q,NODE=%q,GPU=%q,"
             + pod + "=%q,pid=%q}")
    share = fill('{{ with printf "${query}" ${args} | query }}'
                 "{{ . | first | value | humanizePercentage }}{{ else }}a share{{ end }}",
                 query=query, args=query_args("cluster", "node", "gpu", "pod", "pid"))
    who = ("{{ if $labels.pod }}pod {{ $labels.namespace }}/{{ $labels.pod }}"
           "{{ else }}process {{ $labels.pid }}{{ end }}")
    return c.alert(
        name, expr,
        fill("Shared GPU {{ $labels.gpu }} on {{ $labels.node }}: ${who} is busy but "
             "unproductive", who=who),
        c.text("On GPU {{ $labels.gpu }} on {{ $labels.node }}, which several pods or "
               "processes share (time-slicing or MPS), ${who} ran ${share} of the GPU's time "
               "but its SMs were nearly idle while it ran (tiny kernels, launch or sync "
               "bound), or its serving engine made almost no tokens; its neighbours are not "
               "the problem. goodput_gpu_holder_busy_unproductive says which reason.",
               who=who, share=share))


def busy_no_output(c: AlertCtx) -> dict[str, Any]:
    name = "GPUBusyNoOutput"
    tokens = f"sum by ({c.q.gpu_by}) ({c.rec(N.GPU_TOKENS)})"
    expr = (f"{c.rec(N.GPU_UTILIZATION)} >= {c.th(name, 'min_utilization')}\n"
            f"  and on ({c.q.gpu_key})\n  ({tokens} < {c.th(name, 'max_tokens_per_second')})")
    produced = query_value(f"sum({N.GPU_TOKENS}{GPU_MATCH})", 'printf "%.2f"')
    return c.alert(
        name, c.q.with_pods(expr),
        "GPU {{ $labels.gpu }} on {{ $labels.node }} is busy but its serving engine produces "
        "almost no tokens",
        c.text("GPU {{ $labels.gpu }} on {{ $labels.node }}${pod} ran kernels "
               "{{ $value | humanizePercentage }} of the time over ${rate} while the serving "
               "engine attached to it produced ${tokens} tokens/s.", tokens=produced))


def allocated_idle(c: AlertCtx) -> dict[str, Any]:
    name = "GPUAllocatedIdle"
    held = f"{c.q.s('goodput_gpu_processes')} > 0 or {c.q.s('goodput_gpu_pod_info')}"
    expr = (f"{c.rec(N.GPU_UTILIZATION)} < {c.th(name, 'max_utilization')}\n"
            f"  and on ({c.q.gpu_key})\n  ({held})")
    return c.alert(
        name, c.q.with_pods(expr),
        "GPU {{ $labels.gpu }} on {{ $labels.node }} is allocated but idle",
        c.text("GPU {{ $labels.gpu }} on {{ $labels.node }}${pod} is held by a process or pod "
               "but ran kernels only {{ $value | humanizePercentage }} of the time over "
               "${rate}."))


def host_bound(c: AlertCtx) -> dict[str, Any]:
    name = "GPUHostBound"
    expr = (f"{c.q.requests_waiting()} >= {c.th(name, 'min_waiting_requests')}"
            f"\n  and on ({c.q.gpu_key})\n"
            f"  {c.rec(N.GPU_UTILIZATION)} < {c.th(name, 'max_utilization')}")
    util = query_value(f"{N.GPU_UTILIZATION}{GPU_MATCH}", "humanizePercentage")
    return c.alert(
        name, c.q.with_pods(expr),
        "Requests wait on GPU {{ $labels.gpu }} on {{ $labels.node }} while it is mostly idle",
        c.text('On average {{ $value | printf "%.1f" }} requests waited in the queue of the '
               "engine on GPU {{ $labels.gpu }} on {{ $labels.node }}${pod} over ${rate}, yet "
               "the GPU ran kernels only ${util} of the time: the host side (scheduler, "
               "tokenizer, input pipeline) is the bottleneck.", util=util))


JOB = ("job {{ $labels.job_id }} ({{ $labels.job_source }}{{ with $labels.namespace }}, "
       "namespace {{ . }}{{ end }})")


def _waited_share(c: AlertCtx) -> str:
    """A template giving the share of the job's GPU time lost waiting on its peers: the job's
    GPUs lost waiting over the GPUs of the job (each counted once, whichever exporter pods
    report it)."""
    lb = c.cfg.labels
    job = f"{lb.cluster}=%q,{lb.job_source}=%q,{lb.namespace}=%q,{lb.job_id}=%q"
    query = (f"sum({N.JOB_WAITING_GPUS}{{{job}}}) / count(group by ({lb.node}, {lb.gpu}) "
             f"(goodput_gpu_job_info{{{job}}}))")
    args = " ".join([query_args("cluster", "job_source", "namespace", "job_id")] * 2)
    return fill('{{ with printf "${query}" ${args} | query }}The job\'s GPUs lost '
                "{{ . | first | value | humanizePercentage }} of their time waiting on their "
                "peers.{{ else }}No exporter of the job estimates its waiting time.{{ end }}",
                query=query, args=args)


def job_straggler(c: AlertCtx) -> dict[str, Any]:
    """The waiting comparison across nodes (the recorded gap), or the node's own model naming
    the GPU (goodput_job_straggler) for the whole `for`."""
    name, key = "GPUJobStraggler", c.q.job_gpu_by
    # Computed here from each job GPU's waiting share (rules.straggler_gap), not read from
    # goodput:job_straggler:gap_rate5m: vmalert reads a recorded series as of the previous
    # evaluation, so every hop of a chain made the alert a minute later there.
    gap = "(\n" + straggler_gap(c.q, c.rec(N.JOB_GPU_WAITING)) + ")"
    named = f"max by ({key}) ({c.q.s('goodput_job_straggler')}) == 1"
    expr = (f"{gap} >= {c.th(name, 'min_waiting_gap')}\n"
            f"or on ({key})\n  ({gap}\n    and on ({key})\n    {named})")
    return c.alert(
        name, expr,
        "GPU {{ $labels.gpu }} on {{ $labels.node }} holds back " + JOB,
        c.text("GPU {{ $labels.gpu }} on {{ $labels.node }} holds back ${job}: over ${rate} "
               "it waited {{ $value | humanizePercentage }} less of its time than the job's "
               "most-waiting GPU, which waits for it in collectives. ${waited} Look for a "
               "slow or throttled GPU, an uneven shard, a slow input pipeline or a noisy "
               "neighbour on that node.", job=JOB, waited=_waited_share(c)))


def job_losing_to_waiting(c: AlertCtx) -> dict[str, Any]:
    """Waiting with or without a straggler: a rotating imbalance makes every rank wait alike,
    so nobody is named, and the job still loses its GPUs' time. Annotations read only the
    value and the job's own labels (no lookup query: namespace and cluster may be absent)."""
    name = "GPUJobLosingToWaiting"
    # From the per-node split, one hop from the counters, rather than the fourth rule of a
    # chain (goodput:job_waiting:ratio_rate5m): on vmalert each hop costs an evaluation, and
    # the alert fired 3.5 minutes after Prometheus.
    share = job_waiting_share(c.q, c.rec(N.NODE_JOB_GPU_SECONDS))
    expr = f"(\n{share}) >= {c.th(name, 'min_waiting_share')}"
    return c.alert(
        name, expr,
        fill("${job} loses {{ $value | humanizePercentage }} of its GPU time waiting on its "
             "peers", job=JOB[:1].upper() + JOB[1:]),
        c.text("The GPUs of ${job} spent {{ $value | humanizePercentage }} of their time over "
               "${rate} waiting on their peers instead of working. With a straggler, "
               "GPUJobStraggler names it; without one every rank waits alike: a rotating "
               "imbalance (variable sequence lengths, packed batches, MoE routing), pipeline "
               "bubbles or a late rank. The job's time split per part: ${split}.",
               job=JOB, split=N.JOB_GPU_SECONDS))


def low_goodput_vs_fleet(c: AlertCtx) -> dict[str, Any]:
    name, by_model = "GPULowGoodputVsFleet", f"{c.q.target}, model"
    # Tokens per SM-second, its median and the GPUs behind it computed here from two per-GPU
    # rules (one hop from the counters) rather than read from a chain of three recorded
    # ones, which vmalert would make three evaluations late.
    per_sm = (f"({c.rec(N.GPU_TOKENS)}\n    / on ({c.q.gpu_key}) group_left ()\n"
              f"    ({c.rec(N.GPU_SM_ACTIVE)} > 0))")
    expr = (f"{per_sm}\n  < on ({by_model}) group_left ()\n"
            f"  ({c.th(name, 'max_share_of_median')} * quantile by ({by_model}) (0.5, {per_sm}))\n"
            f"and on ({by_model})\n"
            f"  (count by ({by_model}) (group by ({c.q.gpu_by}, model) ({per_sm}))"
            f" >= {c.th(name, 'min_fleet_gpus')})")
    median = ('{{ with printf "${median}{CLUSTER=%q,model=%q}" ' + query_args("cluster", "model")
              + ' | query }}{{ . | first | value | printf "%.1f" }}{{ end }}')
    return c.alert(
        name, expr,
        "GPU {{ $labels.gpu }} on {{ $labels.node }} makes far fewer tokens per SM-second than "
        "the fleet for {{ $labels.model }}",
        c.text("GPU {{ $labels.gpu }} on {{ $labels.node }}${pods} produced "
               '{{ $value | printf "%.1f" }} {{ $labels.model }} tokens per SM-second over '
               "${rate}; the fleet median for that model is " + median + ".",
               median=N.MODEL_TOKENS_PER_SM_MEDIAN))


# Per GPU: every shard evaluates them for its own nodes.
SHARD_EFFICIENCY: list[AlertBuilder] = [busy_but_unproductive, holder_busy_but_unproductive,
                                        busy_no_output, allocated_idle, host_bound]
# The straggler, a job's waiting and the fleet median need every node: global
# (docs/scaling.md).
GLOBAL_EFFICIENCY: list[AlertBuilder] = [job_straggler, job_losing_to_waiting,
                                         low_goodput_vs_fleet]
