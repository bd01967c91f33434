"""The Kubernetes attribution section (``kubernetes:``), next to the sources that read it."""

from __future__ import annotations

from pydantic import Field, model_validator

from exporter.settings.section import LABEL_NAME, MAX_INTERVAL, Section


class KubernetesConfig(Section):
    """Attribution of GPUs and processes to pods; see docs/kubernetes.md."""

    enabled: bool = False
    """Label GPU series with the pods the kubelet assigned them to."""
    kubelet_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    """Kubelet pod-resources socket."""
    interval: float = Field(10.0, gt=0, le=MAX_INTERVAL)
    """How often to ask the kubelet, in seconds (it rate-limits pod-resources to 100 qps,
    burst 10; one List per interval)."""
    timeout: float = Field(5.0, gt=0)
    """Seconds one kubelet call may take."""
    stale_after: float = Field(60.0, ge=0)
    """Keep the last mapping this long while the kubelet is unreachable (restarts), so
    labels do not flap; after that GPUs show as unassigned."""
    resource_names: list[str] = Field(default_factory=list)
    """Extra extended-resource name holding GPUs (fnmatch pattern; repeatable), on top of
    nvidia.com/gpu, nvidia.com/gpu.shared and nvidia.com/mig-*."""
    dra_drivers: list[str] = Field(default_factory=list)
    """Extra DRA driver names (fnmatch patterns) on top of gpu.nvidia.com whose devices in
    PodResources dynamic_resources are GPUs."""
    namespace_label: str = Field(default="namespace", pattern=LABEL_NAME, max_length=128)
    """Label name for the namespace."""
    pod_label: str = Field(default="pod", pattern=LABEL_NAME, max_length=128)
    """Label name for the pod."""
    container_label: str = Field(default="container", pattern=LABEL_NAME, max_length=128)
    """Label name for the container."""
    labels_on_every_series: bool = False
    """Copy namespace/pod/container onto every per-GPU series (one copy per pod holding the
    GPU), for users who cannot join goodput_gpu_pod_info. Multiplies series by pods per GPU
    and makes sums over a shared GPU count it once per pod."""
    processes: bool = True
    """Map GPU processes to pods through <proc_root>/<pid>/cgroup (needs hostPID)."""
    proc_root: str = "/proc"
    """Where the host's /proc is mounted, for PID-to-pod mapping."""
    process_interval: float = Field(5.0, gt=0, le=MAX_INTERVAL)
    """Seconds between reads of the GPU processes' cgroups."""
    device_checkpoint: str = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    """The kubelet's device-manager checkpoint: joins pod UIDs (from cgroups) to pod names."""
    pod_labels: bool = False
    """Read this node's pods' labels from the API server to fill job_name (needs get/list
    on pods): the first of job_labels a pod carries wins."""
    job_labels: list[str] = Field(
        default_factory=lambda: [
            "batch.kubernetes.io/job-name",
            "jobset.sigs.k8s.io/jobset-name",
            "training.kubeflow.org/job-name",
        ]
    )
    """Pod labels that name a pod's job, first match wins."""
    pod_labels_interval: float = Field(30.0, gt=0, le=MAX_INTERVAL)
    """Seconds between reads of this node's pods' labels."""
    pod_labels_timeout: float = Field(10.0, gt=0)
    """Seconds one API-server call for pod labels may take."""
    api_server: str = ""
    """The API server for pod labels; "" means in-cluster
    (https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)."""
    token_path: str = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    """The service-account token presented to the API server."""
    ca_path: str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    """The CA bundle the API server's certificate is checked against."""

    @model_validator(mode="after")
    def _distinct_labels(self) -> KubernetesConfig:
        names = [self.namespace_label, self.pod_label, self.container_label]
        if len(set(names)) != 3:
            raise ValueError(f"namespace/pod/container label names must differ: {names}")
        if {"gpu", "uuid", "node"} & set(names):
            raise ValueError("attribution label names must not be gpu, uuid or node")
        return self
