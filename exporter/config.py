"""Configuration: one schema, three layers (YAML file < ``GOODPUT_*`` environment < flags).

The schema is a tree of pydantic models that forbid unknown keys, so a typo is an error
that names the key instead of a setting silently ignored. Each section belongs to one
source and is documented in README.md's configuration reference.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from exporter import names, yamlfile
from exporter.names import ENGINE_NAMES, Mode

ENV_PREFIX = "GOODPUT_"
CLI_ONLY_ENV = ("GOODPUT_CONFIG", "GOODPUT_WEB_CONFIG_FILE")
"""Environment forms of the file-locating flags: read by the CLI, not settings keys."""
DEFAULT_PORT = 9433
"""Default port: clear of node_exporter (9100), dcgm-exporter (9400) and
nvidia_gpu_exporter (9835)."""
MAX_LABEL_CHARS = 4096
"""No string setting that reaches a label value may be longer (serving.max_label_length's
ceiling too)."""
MAX_NODE_NAME_CHARS = 253
"""A Kubernetes node name is a DNS subdomain: at most 253 characters. It is on every series."""
MAX_FILE_BYTES = yamlfile.MAX_BYTES
"""A config or web-config file longer than this is refused before it is parsed."""
MAX_INTERVAL = 3600.0
"""No interval may exceed an hour: a longer one reads as a source that stopped."""


class ConfigError(Exception):
    """A bad key or value; the message names it. The CLI exits 2 on this."""


class Section(BaseModel):
    # No setting has a use for inf or NaN; an infinite interval would poll once, then never.
    # Field docstrings are the descriptions: the CLI's help text comes from them.
    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True
    )


class Authorization(Section):
    """``Authorization: <type> <credentials>`` on every scrape (Prometheus's spelling)."""

    type: str = "Bearer"
    credentials: SecretStr | None = None
    credentials_file: str = ""
    """Read again whenever its mtime changes, so a rotated token needs no restart."""

    @model_validator(mode="after")
    def _one_source(self) -> Authorization:
        if self.type.strip().lower() == "basic":
            raise ValueError("authorization type Basic: use basic_auth instead")
        if (self.credentials is None) == (not self.credentials_file):
            raise ValueError("authorization needs exactly one of credentials, credentials_file")
        return self


class BasicAuth(Section):
    """HTTP basic authentication (Prometheus's ``basic_auth``)."""

    username: str
    password: SecretStr | None = None
    password_file: str = ""
    """Read again whenever its mtime changes."""

    @model_validator(mode="after")
    def _one_source(self) -> BasicAuth:
        if self.password is not None and self.password_file:
            raise ValueError("basic_auth takes password or password_file, not both")
        return self


class TlsConfig(Section):
    """How to reach an https target (Prometheus's ``tls_config``); files are read again
    when they change."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""
    insecure_skip_verify: bool = False

    @model_validator(mode="after")
    def _pair(self) -> TlsConfig:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("tls_config needs cert_file and key_file together")
        return self


class ServingTarget(Section):
    """One engine endpoint; see docs/serving.md for how GPUs are attributed."""

    url: str = Field(max_length=2048)
    gpus: list[Annotated[str, Field(max_length=128)]] = Field(
        default_factory=list, max_length=64
    )
    engine: str = ""
    model: str = Field("", max_length=MAX_LABEL_CHARS)
    pid: int | None = Field(None, gt=0)
    authorization: Authorization | None = None
    basic_auth: BasicAuth | None = None
    tls_config: TlsConfig | None = None

    @model_validator(mode="after")
    def _one_auth(self) -> ServingTarget:
        if self.authorization is not None and self.basic_auth is not None:
            raise ValueError("a target takes authorization or basic_auth, not both")
        return self

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        from exporter.urls import normalise

        normalise(value)  # BadUrl (a ValueError) names the URL, redacted
        return value

    @field_validator("engine")
    @classmethod
    def _check_engine(cls, value: str) -> str:
        if value and value not in ENGINE_NAMES:
            raise ValueError(f"unknown engine {value!r}; known: {', '.join(sorted(ENGINE_NAMES))}")
        return value


class ServingConfig(Section):
    """Scraping serving engines (vLLM, SGLang, TGI, Triton, ...)."""

    targets: list[ServingTarget] = Field(default_factory=list)
    extra_targets: list[Annotated[str, Field(max_length=2048)]] = Field(default_factory=list)
    """Scrape this serving engine's /metrics (repeatable), in addition to targets."""
    interval: float = Field(1.0, gt=0, le=MAX_INTERVAL)
    """Seconds between scrape rounds: 1 s keeps token rates as fresh as the GPU's."""
    timeout: float = Field(2.0, gt=0)
    max_body_bytes: int = Field(8 * 1024 * 1024, gt=0)
    max_concurrency: int = Field(8, gt=0)
    discover_pods: bool = False
    """Scrape annotated pods on this node (a Kubernetes API watch for the serving
    annotations)."""
    annotation_prefix: str = "serving.goodput.dev/"
    max_targets: int = Field(64, gt=0, le=10_000)
    """Targets scraped at most (static and discovered together); a config listing more is
    refused, discovered pods past it are dropped and counted. Each target costs about ten
    series, a scrape slot and a parse per interval."""
    max_models_per_target: int = Field(8, gt=0, le=1000)
    """Model label values one target may publish; more are dropped and counted
    (max_models), so an engine that renames its model every scrape cannot grow series."""
    max_label_length: int = Field(200, ge=16, le=4096)
    """Model label values are cut to this many characters (counted as label_too_long)."""
    stale_after: float = Field(300.0, gt=0, le=86400)
    """Seconds after which a model (or a down target) no reading mentioned loses its series
    and its place under max_models_per_target."""
    max_tokens_per_second_per_gpu: float = Field(2e6, gt=0, allow_inf_nan=False)
    """Token growth per GPU per second above this is implausible: dropped and counted. See
    docs/serving.md "Trust" for how the default was chosen."""

    @field_validator("targets", mode="before")
    @classmethod
    def _url_shorthand(cls, value: Any) -> Any:
        """``- http://host:8000/metrics`` in a targets list means ``- url: ...``."""
        if isinstance(value, list):
            return [{"url": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("extra_targets")
    @classmethod
    def _check_extra(cls, value: list[str]) -> list[str]:
        from exporter.urls import normalise

        for url in value:
            normalise(url)
        return value

    @model_validator(mode="after")
    def _one_label_per_target(self) -> ServingConfig:
        """Two targets that would publish one ``target`` label (they differ only in
        credentials or query values) would mix their series and count tokens twice:
        refused. Spellings of one URL (case, default port, fragment) are merged later."""
        if not self.targets and not self.extra_targets:
            return self
        from exporter.urls import label, normalise

        seen: dict[str, tuple[str, object]] = {}
        entries = [(t.url, (t.authorization, t.basic_auth, t.tls_config)) for t in self.targets]
        entries += [(url, (None, None, None)) for url in self.extra_targets]
        for url, access in entries:
            key = normalise(url)
            name = label(key)
            first = seen.setdefault(name, (key, access))
            if first != (key, access):
                raise ValueError(
                    f"two serving targets publish the same target label {name!r} (they differ "
                    "only in credentials, TLS settings or query values); list one"
                )
        return self

    @model_validator(mode="after")
    def _under_cap(self) -> ServingConfig:
        count = len(self.targets) + len(self.extra_targets)
        if count > self.max_targets:
            raise ValueError(
                f"{count} serving targets configured, more than max_targets "
                f"({self.max_targets}); raise serving.max_targets or list fewer"
            )
        return self


_LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"


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
    # Keep the last mapping this long while the kubelet is unreachable (restarts), so labels
    # do not flap; after that GPUs show as unassigned.
    stale_after: float = Field(60.0, ge=0)
    resource_names: list[str] = Field(default_factory=list)
    """Extra extended-resource name holding GPUs (fnmatch pattern; repeatable), on top of
    nvidia.com/gpu, nvidia.com/gpu.shared and nvidia.com/mig-*."""
    # Extra DRA driver names (fnmatch patterns) on top of gpu.nvidia.com whose devices in
    # PodResources dynamic_resources are GPUs.
    dra_drivers: list[str] = Field(default_factory=list)
    namespace_label: str = Field(default="namespace", pattern=_LABEL_NAME, max_length=128)
    """Label name for the namespace."""
    pod_label: str = Field(default="pod", pattern=_LABEL_NAME, max_length=128)
    """Label name for the pod."""
    container_label: str = Field(default="container", pattern=_LABEL_NAME, max_length=128)
    """Label name for the container."""
    labels_on_every_series: bool = False
    """Copy namespace/pod/container onto every per-GPU series (one copy per pod holding the
    GPU), for users who cannot join goodput_gpu_pod_info. Multiplies series by pods per GPU
    and makes sums over a shared GPU count it once per pod."""
    # PID -> pod through <proc_root>/<pid>/cgroup; needs hostPID.
    processes: bool = True
    proc_root: str = "/proc"
    """Where the host's /proc is mounted, for PID-to-pod mapping."""
    process_interval: float = Field(5.0, gt=0, le=MAX_INTERVAL)
    # Kubelet's device-manager checkpoint: joins pod UIDs (from cgroups) to pod names.
    device_checkpoint: str = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
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
    pod_labels_interval: float = Field(30.0, gt=0, le=MAX_INTERVAL)
    pod_labels_timeout: float = Field(10.0, gt=0)
    # "" = in-cluster (https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT).
    api_server: str = ""
    token_path: str = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    ca_path: str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

    @model_validator(mode="after")
    def _distinct_labels(self) -> KubernetesConfig:
        names = [self.namespace_label, self.pod_label, self.container_label]
        if len(set(names)) != 3:
            raise ValueError(f"namespace/pod/container label names must differ: {names}")
        if {"gpu", "uuid", "node"} & set(names):
            raise ValueError("attribution label names must not be gpu, uuid or node")
        return self


class ProfilingConfig(Section):
    """Which source fills the profiling counters (SM active, tensor, DRAM, ...).

    ``auto`` decides per GPU: NVML GPM where the GPU supports it (Hopper and newer), else a
    DCGM host engine if one answers at ``dcgm_host_engine``, else ``dcgm_exporter_url`` if set.
    See docs/profiling.md.
    """

    mode: Mode = "auto"
    """Where profiling counters come from: auto picks GPM on Hopper and newer, else DCGM if a
    host engine answers, else dcgm-exporter if configured."""
    dcgm_host_engine: str = "localhost:5555"
    """DCGM host engine: HOST:PORT, unix:///path/to/socket, or embedded (start one
    in-process, needs SYS_ADMIN; never chosen by auto since a second engine fights the
    node's one for the profiler)."""
    dcgm_bindings_path: str = ""
    """Directory holding DCGM's Python bindings (dcgm_agent.py ...); searched before the
    standard install locations."""
    dcgm_library_path: str = ""
    """Directory holding libdcgm.so.4, when it is not on the loader's default path."""
    dcgm_interval: float = Field(1.0, ge=0.1, le=60)
    dcgm_connect_timeout: float = Field(2.0, gt=0, le=60)
    dcgm_exporter_url: str = ""
    """A node-local dcgm-exporter /metrics to take profiling counters from, e.g.
    http://localhost:9400/metrics."""
    dcgm_exporter_interval: float = Field(5.0, ge=0.5, le=300)
    dcgm_exporter_timeout: float = Field(2.0, gt=0, le=60)
    dcgm_exporter_max_body_bytes: int = Field(16 * 1024 * 1024, gt=0)

    @model_validator(mode="after")
    def _check_mode(self) -> ProfilingConfig:
        if self.mode == "dcgm-exporter" and not self.dcgm_exporter_url:
            raise ValueError("profiling.mode dcgm-exporter needs profiling.dcgm_exporter_url")
        if self.dcgm_exporter_url:
            from exporter.urls import normalise

            normalise(self.dcgm_exporter_url, "profiling.dcgm_exporter_url")
        return self


class ModelConfig(Section):
    """Thresholds of the efficiency model; docs/efficiency.md explains each default.

    Ratios are 0..1 window averages (kernel-time ``util``, ``sm_active``...).
    ``sm_fill`` is ``sm_active / util``: how much of the GPU a kernel fills while one runs.
    """

    interval: float | None = Field(default=None, ge=0.5, le=60)
    """Seconds between model evaluations (one "window"); None means the daemon interval."""
    enter_windows: int = Field(default=3, ge=1, le=100)
    """Consecutive windows a new regime (or a busy_unproductive flag) must hold to be entered."""
    leave_windows: int = Field(default=2, ge=1, le=100)
    """Consecutive windows the current regime (or flag) must be absent before it is left."""
    idle_util_max: float = Field(default=0.01, ge=0, le=1)
    """Kernel time at or below this is idle (or allocated_idle when memory or a process is held).
    Low on purpose: a sync-per-step loop runs kernels 2-9 % of the time and is host_bound."""
    allocated_memory_min_ratio: float = Field(default=0.05, ge=0, le=1)
    """Memory used above this share of the total counts as allocated even without a process."""
    launch_sm_fill_max: float = Field(default=0.35, ge=0, le=1)
    """sm_fill below this while kernels run means tiny kernels / skinny GEMMs: launch_bound."""
    host_low_duty_max: float = Field(default=0.15, ge=0, le=1)
    """Kernel time below this (and above idle) is host_bound whatever the kernels look like:
    a sync-per-step loop measured 8.5 % utilization with SM active 2.3 %."""
    host_util_max: float = Field(default=0.7, ge=0, le=1)
    """Kernel time below this (with kernels that do fill the SMs) means host_bound."""
    host_util_max_queued: float = Field(default=0.9, ge=0, le=1)
    """Same, when the attributed engine has requests waiting (work exists, GPU not fed)."""
    compute_tensor_min: float = Field(default=0.4, ge=0, le=1)
    """Tensor-pipe activity at or above this is compute_bound."""
    compute_fp_min: float = Field(default=0.5, ge=0, le=1)
    """Any FP pipe (fp64/fp32/fp16) activity at or above this is compute_bound."""
    memory_dram_min: float = Field(default=0.5, ge=0, le=1)
    """DRAM bandwidth at or above this share of peak is memory_bound."""
    transfer_link_min_ratio: float = Field(default=0.5, ge=0, le=1)
    """PCIe or NVLink traffic in one direction at or above this share of the link's usable
    peak, with the SMs nearly idle, is transfer_bound (58.7 of 63 GB/s measured on a
    pinned host-to-device stream)."""
    bus_floor_bytes_per_second: float = Field(default=50e6, ge=0)
    """PCIe or NVLink traffic (the busiest link direction) at or above this means the GPU is
    fed over the bus: never idle or allocated_idle. An idle H100/H200 reads 0.3-0.6 MB/s."""
    transfer_copy_time_min: float = Field(default=0.4, ge=0, le=1)
    """In a bus-fed window with few kernels, copy-engine time (NVML utilization minus GPM
    graphics activity) at or above this is transfer_bound; below it the host sets the pace
    (pageable staging, a throttled producer): host_bound."""
    comm_min_bytes_per_second: float = Field(default=1e9, ge=0)
    """NVLink traffic (both directions) at or above this, with kernels that barely fill the
    SMs, is a rank waiting in a collective (comm_wait), not tiny kernels (launch_bound); PCIe
    traffic (busier direction) at or above it with such kernels is bus work: transfer_bound or
    host_bound by copy-engine time, never launch_bound or hollow_busy."""
    straggler_gap: float = Field(default=0.3, ge=0, le=1)
    """A GPU of a multi-GPU job whose work (max of SM active and tensor activity) exceeds
    every busy peer's by this much, while the peers wait in collectives, holds the job back."""
    hollow_min: float = Field(default=0.3, ge=0, le=1)
    """hollow_busy needs util - sm_active at least this (plus sm_fill under launch_sm_fill_max)."""
    no_output_util_min: float = Field(default=0.5, ge=0, le=1)
    """busy_no_output needs kernel time at least this..."""
    no_output_tokens_per_second: float = Field(default=1.0, ge=0)
    """...while the attributed engine makes fewer tokens per second than this."""
    no_output_needs_profiling: bool = True
    """Suppress busy_no_output too while profiling is unusable (the conservative reading)."""
    silent_zero_util_min: float = Field(default=0.5, ge=0, le=1)
    """Every profiling ratio exactly 0 while util >= this (and power high) is a broken reader."""
    silent_zero_power_min_ratio: float = Field(default=0.2, ge=0, le=1)
    """"Power high" for silent zeros: power / power limit at or above this."""
    stale_after_seconds: float = Field(default=30.0, gt=0)
    """Profiling (or serving) input older than this is stale."""
    min_sm_active_for_rate: float = Field(default=0.01, ge=0, le=1)
    """tokens_per_sm_second is not published below this SM activity (the ratio explodes)."""
    score_weights: dict[str, float] = Field(
        default_factory=lambda: {"sm_active": 0.3, "occupancy": 0.2, "wall": 0.5}
    )
    """Weights of the efficiency score terms (normalised over the terms that are known)."""
    efficiency_token_kinds: list[str] = Field(default_factory=lambda: ["generation"])
    """Token kinds counted by tokens_per_sm_second and joules_per_token."""
    model_parameters: dict[str, float] = Field(default_factory=dict)
    """Parameters per served model name (active parameters for MoE), for 2 x N FLOPs/token."""
    mfu_dtype: str = "bf16"
    """Dtype whose peak dense FLOP/s divides achieved FLOP/s (bf16, fp16, fp8, tf32, fp32...)."""
    model_dtypes: dict[str, str] = Field(default_factory=dict)
    """Per-model dtype overriding mfu_dtype."""
    peak_flops: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Peak dense FLOP/s by GPU-name substring and dtype; checked before the built-in table."""

    @field_validator("score_weights")
    @classmethod
    def _check_weights(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = set(value) - {"sm_active", "occupancy", "wall"}
        if unknown:
            raise ValueError(f"unknown score weight(s) {sorted(unknown)}")
        if any(w < 0 for w in value.values()) or sum(value.values()) <= 0:
            raise ValueError("score weights must be >= 0 with a positive sum")
        return value


class Settings(Section):
    listen: str = f":{DEFAULT_PORT}"
    """Address to serve /metrics on; port 0 picks a free port and logs it."""
    simulate: bool = False
    """Run on the built-in simulated node (one workload per GPU) instead of NVML."""
    interval: float = Field(1.0, ge=0.1, le=60)
    """GPU poll interval in seconds."""
    log_format: Literal["json", "console"] = "json"
    """Log format."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Lowest log level written."""
    node_name: str = Field(
        default_factory=lambda: os.environ.get("NODE_NAME", "") or _hostname(),
        max_length=MAX_NODE_NAME_CHARS,
    )
    """Value of the node label (default $NODE_NAME or the hostname)."""
    # The default is one GPU per workload of exporter/sim/patterns.py NODE.
    simulate_gpus: int = Field(12, ge=1, le=64)
    """Number of simulated GPUs."""
    serving: ServingConfig = ServingConfig()
    kubernetes: KubernetesConfig = KubernetesConfig()
    profiling: ProfilingConfig = ProfilingConfig()
    model: ModelConfig = ModelConfig()
    collectors: dict[str, bool] = Field(default_factory=dict)
    """Collectors switched on (true) or off (false) against their default; see --help."""
    extended_metrics: bool = False
    """Also publish the optional families (docs/metrics.md marks them): every pipe,
    per-window gauges next to their counters, clock-event states, remapped rows."""
    debug_state: bool = True
    """Serve /debug/state (the snapshot as JSON); the Helm chart turns it off."""

    @field_validator("collectors")
    @classmethod
    def _known_collectors(cls, value: dict[str, bool]) -> dict[str, bool]:
        known = names.COLLECTOR_NAMES
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(f"unknown collector(s) {unknown}; known: {', '.join(known)}")
        return value

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        parse_listen(value)
        return value


def _hostname() -> str:
    import socket

    return socket.gethostname()


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``[v6]:PORT`` to (host, port); host "" means all, port 0
    a free port the kernel picks (the daemon logs which)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"listen address {value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def read_text(path: str | Path, what: str) -> str:
    """A file's UTF-8 text; ``what`` names it in the ValueError a bad file gives."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{what} {path}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"{what} {path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{what} {path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from exc


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line report as one line: the problem and where it is."""
    return yamlfile.describe(exc)


def load_file(path: str | Path) -> dict[str, Any]:
    try:
        text = read_text(path, "config file")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    try:
        data = yamlfile.parse(text)
    except yamlfile.YamlError as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping")
    return data


def from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """``GOODPUT_INTERVAL=2`` -> {"interval": 2}; ``GOODPUT_SERVING__TIMEOUT`` nests.

    Values are parsed as YAML scalars/flow collections so lists work
    (``GOODPUT_SERVING__TARGETS='[{url: http://...}]'``). Variables that name no setting
    are left out (see :func:`ignored_env`): Kubernetes injects ``<SERVICE>_PORT=tcp://...``
    variables for every service, and one named like ours must not stop the exporter.
    """
    out: dict[str, Any] = {}
    for key, raw in environ.items():
        path = _env_path(key)
        if path is None:
            continue
        try:
            value = yamlfile.parse(raw) if raw.strip() else raw
        except yamlfile.YamlError:
            value = raw
        if isinstance(value, (int, float, bool, list, dict)) or value is None:
            parsed: Any = value
        else:
            parsed = raw
        _set_path(out, path, parsed, origin=key)
    return out


def ignored_env(environ: Mapping[str, str]) -> list[str]:
    """``GOODPUT_*`` variables that name no setting (the CLI warns about them)."""
    return sorted(
        key
        for key in environ
        if key.startswith(ENV_PREFIX) and key not in CLI_ONLY_ENV and _env_path(key) is None
    )


def _env_path(key: str) -> list[str] | None:
    """The settings path a variable names, or None when it names none."""
    if not key.startswith(ENV_PREFIX) or key in CLI_ONLY_ENV:
        return None
    path = key[len(ENV_PREFIX) :].lower().split("__")
    model: Any = Settings
    for part in path[:-1]:
        field_info = model.model_fields.get(part)
        annotation = getattr(field_info, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return path if path[-1] in model.model_fields else None


def _set_path(tree: dict[str, Any], path: list[str], value: Any, origin: str) -> None:
    node = tree
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{origin}: conflicts with another setting for {part}")
        node = child
    node[path[-1]] = value


def merge(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge mappings; later layers win key by key."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            else:
                out[key] = value
    return out


def build(
    flags: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    config_file: str | None = None,
) -> Settings:
    """Resolve settings from the three layers, or raise :class:`ConfigError`."""
    file_layer = load_file(config_file) if config_file else {}
    env_layer = from_env(os.environ if environ is None else environ)
    try:
        return Settings.model_validate(merge(file_layer, env_layer, flags))
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from exc


def describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown config key {key!r}")
        else:
            parts.append(f"bad value for {key!r}: {err['msg']}")
    return "; ".join(parts)
