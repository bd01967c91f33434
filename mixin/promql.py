"""PromQL building blocks shared by the rules, the alerts and the dashboards."""

from __future__ import annotations

from mixin.config import Config


class PromQL:
    """Selectors and joins for one configuration."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        lb = cfg.labels
        self.cluster, self.node, self.gpu = lb.cluster, lb.node, lb.gpu
        self.pod_labels = [lb.namespace, lb.pod, lb.container, lb.job_name]
        # The labels that identify one GPU; every join between per-GPU series uses them.
        self.gpu_key = f"{lb.cluster}, {lb.node}, {lb.gpu}"
        self.node_key = f"{lb.cluster}, {lb.node}"

    def s(self, metric: str, matchers: str = "") -> str:
        """``metric`` restricted to the exporter's series (the configured selector)."""
        inner = ", ".join(m for m in (self.cfg.selector, matchers) if m)
        return f"{metric}{{{inner}}}"

    def rate(self, metric: str, window: str | None = None, matchers: str = "") -> str:
        return f"rate({self.s(metric, matchers)}[{window or self.cfg.windows.rate}])"

    def with_pods(self, expr: str, keep: list[str] | None = None, *,
                  only_attributed: bool = False, pod_labels: list[str] | None = None,
                  info_matchers: str = "") -> str:
        """``expr`` (at most one series per GPU) with the pod labels of goodput_gpu_pod_info
        attached: one result per (GPU, pod, container) of the GPU, so a GPU shared by two
        pods gives two series. ``keep`` names the labels of ``expr`` to carry over besides
        the info series' own (job, instance, cluster, node, gpu and the pod labels).

        ``info_matchers`` restricts the pods joined (e.g. to some namespaces). A GPU without a
        pod (or without a matching one) keeps its series unchanged, unless ``only_attributed``.
        ``pod_labels`` narrows the attached labels (e.g. to the namespace only): the info
        series are then grouped by those, so two pods of one namespace on one GPU count once.
        """
        info = self.s("goodput_gpu_pod_info", info_matchers)
        if pod_labels is not None:
            info = f"group by ({self.gpu_key}, {', '.join(pod_labels)}) ({info})"
        joined = (f"({expr})\n  * on ({self.gpu_key}) group_right ({', '.join(keep or [])})\n"
                  f"  {info}")
        if only_attributed:
            return joined
        return f"{joined}\nor on ({self.gpu_key})\n  ({expr})"
