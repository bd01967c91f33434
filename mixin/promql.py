"""PromQL building blocks shared by the rules, the alerts and the dashboards."""

from __future__ import annotations

import re

from mixin import names as N
from mixin.config import Config

# Label names a selector matches on: `job="x", env=~"p.*"` -> job, env.
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


class PromQL:
    """Selectors, aggregations and joins for one configuration.

    A GPU is (cluster, node, gpu). A series also carries its scrape target's identity
    (instance, and whatever target labels the scrape config adds); when an exporter pod is
    replaced, both targets' series of one GPU sit inside every rate window. Every rule
    therefore first aggregates ``by`` the labels it means to keep (``self.gpu_by``: the
    selector's labels, cluster, node, gpu), never ``without``: target labels nobody listed
    (instance, the exporter pod's namespace/pod/container, service, endpoint) cannot leak
    into a rule's result or split one GPU in two.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        lb = cfg.labels
        self.cluster, self.node, self.gpu = lb.cluster, lb.node, lb.gpu
        self.pod_labels = [lb.namespace, lb.pod, lb.container, lb.job_name]
        # The job key (goodput_gpu_job_info), whatever the job's source.
        self.job_labels = [lb.job_source, lb.namespace, lb.job_id]
        # The labels that identify one GPU; every join between per-GPU series uses them.
        self.gpu_key = f"{lb.cluster}, {lb.node}, {lb.gpu}"
        self.node_key = f"{lb.cluster}, {lb.node}"
        # The labels the selector matches on survive every aggregation, so recorded series
        # still answer to the selector (job="gpu-goodput-exporter"); instance never does.
        target = [n for n in dict.fromkeys(_MATCHER.findall(cfg.selector))
                  if n not in {"instance", lb.cluster, lb.node, lb.gpu, *self.pod_labels,
                               *self.job_labels}]
        self.target = ", ".join([lb.cluster, *target])
        # Aggregation keys: one series per GPU / node, the target's identity summed away.
        self.gpu_by = f"{self.target}, {lb.node}, {lb.gpu}"
        self.node_by = f"{self.target}, {lb.node}"
        # One series per job (on any node) / per GPU of a job.
        self.job_by = ", ".join([self.target, *self.job_labels])
        self.job_gpu_by = ", ".join([self.job_by, lb.node, lb.gpu])

    def s(self, metric: str, matchers: str = "") -> str:
        """``metric`` restricted to the exporter's series (the configured selector)."""
        inner = ", ".join(m for m in (self.cfg.selector, matchers) if m)
        return f"{metric}{{{inner}}}"

    def rate(self, metric: str, window: str | None = None, matchers: str = "") -> str:
        return f"rate({self.s(metric, matchers)}[{window or self.cfg.windows.rate}])"

    def increase(self, metric: str, window: str, matchers: str = "") -> str:
        """What ``metric`` (a counter) rose by over ``window``, meaning the same on Prometheus
        and VictoriaMetrics: a series that already existed at the window's start takes
        increase() (both engines see its rise from there); a series born inside the window
        counts only what it rose after its first sample. increase() alone differs there:
        Prometheus starts from the first sample, MetricsQL from 0, so on VictoriaMetrics an
        XID or ECC counter first scraped at 1 - an error from before monitoring started -
        would count as a new one."""
        sel = self.s(metric, matchers)
        return (f"(\n  increase({sel}[{window}])\n    and {sel} offset {window}\n"
                f"  or {sel} - min_over_time({sel}[{window}])\n)")

    def live(self, expr: str) -> str:
        """``expr`` only for nodes an exporter answers for now (its build info scraped at
        the last scrape): a dead exporter's figures go at the next evaluation, on every
        engine. Without it a rate() keeps its last 5 minutes' samples (Prometheus fades it
        over the window; VictoriaMetrics holds it at full value longer, and each chained
        rule adds an evaluation). An old and a new exporter pod of a node keep it alive
        alike."""
        build = self.s("goodput_exporter_build_info")
        return f"{expr.rstrip()}\n  and on ({self.node_key}) {build}\n"

    def per_gpu(self, op: str, expr: str, *extra: str) -> str:
        """``op by (<gpu_by>, extra...) (expr)``: one series per GPU (and extra labels),
        whichever exporter pod (instance) reported it."""
        by = ", ".join([self.gpu_by, *extra])
        return f"{op} by ({by}) ({expr})"

    def pod_info(self, info_matchers: str = "", pod_labels: list[str] | None = None) -> str:
        """goodput_gpu_pod_info, one series per (GPU, pod labels): the same pod reported by
        an old and a new exporter pod counts once."""
        labels = self.pod_labels if pod_labels is None else pod_labels
        return (f"group by ({self.gpu_by}, {', '.join(labels)}) "
                f"({self.s('goodput_gpu_pod_info', info_matchers)})")

    def with_pods(self, expr: str, keep: list[str] | None = None, *,
                  only_attributed: bool = False, pod_labels: list[str] | None = None,
                  info_matchers: str = "") -> str:
        """``expr`` (at most one series per GPU) with the pod labels of goodput_gpu_pod_info
        attached: one result per (GPU, pod, container) of the GPU, so a GPU shared by two
        pods gives two series. ``keep`` names the labels of ``expr`` to carry over besides
        the info series' own (the selector's labels, cluster, node, gpu and the pod labels).

        ``info_matchers`` restricts the pods joined (e.g. to some namespaces). A GPU without a
        pod (or without a matching one) keeps its series unchanged, unless ``only_attributed``.
        ``pod_labels`` narrows the attached labels (e.g. to the namespace only), so two pods
        of one namespace on one GPU count once. The info series are grouped either way: the
        target's own labels (instance, the exporter pod's namespace/pod when the scrape
        config keeps them) never reach the result.
        """
        info = self.pod_info(info_matchers, pod_labels)
        joined = (f"({expr})\n  * on ({self.gpu_key}) group_right ({', '.join(keep or [])})\n"
                  f"  {info}")
        if only_attributed:
            return joined
        return f"{joined}\nor on ({self.gpu_key})\n  ({expr})"

    def sm_active_ratio(self) -> str:
        """The share of profiled time the SMs were active, per GPU, from two recorded series
        (no rule records it: one series per GPU saved of the 60-per-GPU budget,
        docs/scaling.md). Absent while profiling covered none of the window."""
        return (f"({self.s(N.GPU_SM_ACTIVE)}\n"
                f"  / ({self.s(N.GPU_PROFILED)} > 0))")

    def requests_waiting(self) -> str:
        """The time average of a GPU's queue over the rate window, summed over its engines;
        the samples of every exporter pod in the window weigh alike. Only GPUHostBound reads
        it, so it is computed there rather than recorded for every serving GPU."""
        waiting = self.s("goodput_gpu_serving_requests", 'state="waiting"')
        w = self.cfg.windows.rate
        return (f"sum by ({self.gpu_by}) (\n"
                f"  {self.per_gpu('sum', f'sum_over_time({waiting}[{w}])', 'model', 'engine')}"
                "\n  /\n"
                f"  {self.per_gpu('sum', f'count_over_time({waiting}[{w}])', 'model', 'engine')}"
                "\n)")
