"""Command line: parse flags, resolve settings, wire the daemon, serve. Nothing else."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import structlog
from aiohttp import web

from exporter import __version__, webconfig
from exporter.config import (
    DEFAULT_PORT,
    ConfigError,
    Settings,
    build,
    ignored_env,
    parse_listen,
)
from exporter.interpreter import shorten_switch_interval
from exporter.logging import configure
from exporter.memory import tune_malloc
from exporter.server import address_of, bind_ephemeral
from exporter.sources.nvml_session import NvmlUnavailable
from exporter.sources.profiling.modes import MODES

EXIT_USAGE = 2
# The help quotes the setting's own default, so the two cannot disagree.
_SIM_GPUS = Settings.model_fields["simulate_gpus"].default


def parser() -> argparse.ArgumentParser:
    """All flags. A ``dest`` of ``section__key`` sets the nested settings key."""
    p = argparse.ArgumentParser(
        prog="gpu-goodput-exporter",
        description="Prometheus exporter that tells whether GPUs do useful work.",
        argument_default=argparse.SUPPRESS,
        epilog="Each setting flag names its environment variable in [brackets] (nested keys: "
        "GOODPUT_SECTION__KEY, values parsed as YAML) and has the same key in the --config "
        "YAML file; flags win over the environment, which wins over the file. GOODPUT_* "
        "variables that name no setting are ignored with a warning.",
    )
    add = p.add_argument
    add("--version", action="version", version=f"%(prog)s {__version__}")
    add("--config", metavar="FILE", help="YAML configuration file")
    add(
        "--web-config-file",
        dest="web_config_file",
        metavar="FILE",
        help="TLS and basic-auth settings in the format of Prometheus's exporter-toolkit",
    )
    add(
        "--listen",
        metavar="HOST:PORT",
        help=f"address to serve /metrics on (default :{DEFAULT_PORT}; port 0 picks a free "
        "port and logs it)",
    )
    add(
        "--simulate",
        action="store_true",
        help=f"run on the built-in simulated {_SIM_GPUS}-GPU node (one workload per GPU) "
        "instead of NVML",
    )
    add(
        "--simulate-gpus",
        type=int,
        dest="simulate_gpus",
        metavar="N",
        help=f"number of simulated GPUs (default {_SIM_GPUS})",
    )
    add("--interval", type=float, metavar="SECONDS", help="GPU poll interval (default 1)")
    add(
        "--node-name",
        dest="node_name",
        metavar="NAME",
        help="value of the node label (default $NODE_NAME or the hostname)",
    )
    add(
        "--log-format",
        dest="log_format",
        choices=["json", "console"],
        help="log format (default json)",
    )
    add(
        "--log-level",
        dest="log_level",
        choices=["debug", "info", "warning", "error"],
        help="default info",
    )
    add(
        "--profiling",
        dest="profiling__mode",
        choices=MODES,
        help="where profiling counters come from: auto picks GPM on Hopper and newer, "
        "else DCGM if a host engine answers, else dcgm-exporter if configured (default auto)",
    )

    serve = p.add_argument_group("serving engines (docs/serving.md)")
    serve.add_argument(
        "--serving-target",
        action="append",
        dest="serving__extra_targets",
        metavar="URL",
        help="scrape this serving engine's /metrics (repeatable)",
    )
    serve.add_argument(
        "--discover-serving-pods",
        action="store_true",
        dest="serving__discover_pods",
        help="scrape annotated pods on this node (Kubernetes API watch)",
    )

    prof = p.add_argument_group("profiling counters (docs/profiling.md)")
    prof.add_argument(
        "--dcgm-host-engine",
        dest="profiling__dcgm_host_engine",
        metavar="ADDR",
        help="DCGM host engine: host:port, unix socket path, or 'embedded' (needs SYS_ADMIN)",
    )
    prof.add_argument(
        "--dcgm-exporter-url",
        dest="profiling__dcgm_exporter_url",
        metavar="URL",
        help="a dcgm-exporter /metrics to take profiling counters from",
    )
    prof.add_argument(
        "--dcgm-bindings-path",
        dest="profiling__dcgm_bindings_path",
        metavar="DIR",
        help="where DCGM's Python bindings are installed",
    )

    add(
        "--extended-metrics",
        action="store_true",
        dest="extended_metrics",
        help="also publish the optional families (docs/metrics.md marks them)",
    )
    add(
        "--no-debug-state",
        action="store_false",
        dest="debug_state",
        help="do not serve /debug/state (the snapshot as JSON)",
    )
    add_collector_flags(p)

    k8s = p.add_argument_group("kubernetes attribution (docs/kubernetes.md)")
    k8s.add_argument(
        "--kubernetes",
        action="store_true",
        dest="kubernetes__enabled",
        help="label GPU series with the pods the kubelet assigned them to",
    )
    k8s.add_argument(
        "--kubelet-socket",
        dest="kubernetes__kubelet_socket",
        metavar="PATH",
        help="kubelet pod-resources socket (default /var/lib/kubelet/pod-resources/kubelet.sock)",
    )
    k8s.add_argument(
        "--kubelet-interval",
        type=float,
        dest="kubernetes__interval",
        metavar="SECONDS",
        help="how often to ask the kubelet (default 10)",
    )
    k8s.add_argument(
        "--kubernetes-resource-name",
        action="append",
        dest="kubernetes__resource_names",
        metavar="NAME",
        help="extra extended-resource name holding GPUs (repeatable)",
    )
    k8s.add_argument(
        "--kubernetes-labels-on-every-series",
        action="store_true",
        dest="kubernetes__labels_on_every_series",
        help="copy namespace/pod/container onto every per-GPU series (one copy per pod), "
        "instead of only on goodput_gpu_pod_info",
    )
    k8s.add_argument(
        "--kubernetes-namespace-label",
        dest="kubernetes__namespace_label",
        metavar="NAME",
        help="label name for the namespace (default namespace)",
    )
    k8s.add_argument(
        "--kubernetes-pod-label",
        dest="kubernetes__pod_label",
        metavar="NAME",
        help="label name for the pod (default pod)",
    )
    k8s.add_argument(
        "--kubernetes-container-label",
        dest="kubernetes__container_label",
        metavar="NAME",
        help="label name for the container (default container)",
    )
    k8s.add_argument(
        "--kubernetes-pod-labels",
        action="store_true",
        dest="kubernetes__pod_labels",
        help="read this node's pods' labels from the API server to fill job_name "
        "(needs get/list on pods)",
    )
    k8s.add_argument(
        "--proc-root",
        dest="kubernetes__proc_root",
        metavar="PATH",
        help="where the host's /proc is mounted, for PID-to-pod mapping",
    )
    _name_env_vars(p)
    return p


def _name_env_vars(p: argparse.ArgumentParser) -> None:
    """Append the real environment variable of every setting flag to its help."""
    for action in p._actions:
        dest = action.dest
        if dest in ("help", "version") or dest.startswith("collectors__"):
            continue
        env = "GOODPUT_" + dest.upper()
        if action.help and action.help is not argparse.SUPPRESS:
            action.help = f"{action.help} [{env}]"


def add_collector_flags(p: argparse.ArgumentParser) -> None:
    """``--collector.<name>`` / ``--no-collector.<name>`` for every registered collector."""
    from exporter.collectors import REGISTRY

    group = p.add_argument_group(
        "collectors",
        "Switch a collector on (--collector.NAME) or off (--no-collector.NAME) against its "
        "default; config file: collectors: {NAME: true|false}.",
    )
    for c in REGISTRY:
        dest = f"collectors__{c.name}"
        group.add_argument(f"--collector.{c.name}", dest=dest, action="store_true", help=c.help)
        group.add_argument(
            f"--no-collector.{c.name}", dest=dest, action="store_false", help="turn it off"
        )


def flags_to_tree(ns: argparse.Namespace) -> dict[str, Any]:
    """Flat argparse results to the nested settings tree (``section__key`` nests)."""
    flat = vars(ns).copy()
    flat.pop("config", None)
    flat.pop("web_config_file", None)
    tree: dict[str, Any] = {}
    for key, value in flat.items():
        *sections, name = key.split("__")
        node = tree
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    return tree


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        config_file = getattr(args, "config", None) or os.environ.get("GOODPUT_CONFIG")
        settings = build(flags_to_tree(args), config_file=config_file)
    except ConfigError as exc:
        print(f"gpu-goodput-exporter: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # SIGHUP before the reload handler is in place must not end the process (its default).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    tune_malloc()
    shorten_switch_interval()
    configure(settings.log_format, settings.log_level)
    log = structlog.get_logger("main")
    ignored = ignored_env(os.environ)
    if ignored:
        log.warning(
            "environment_variables_ignored",
            names=ignored,
            reason="GOODPUT_* variables that name no setting (e.g. Kubernetes service links)",
        )
    web_config_file = getattr(args, "web_config_file", None) or os.environ.get(
        "GOODPUT_WEB_CONFIG_FILE"
    )
    try:
        web_config = webconfig.load(web_config_file)
    except webconfig.WebConfigError as exc:
        print(f"gpu-goodput-exporter: {exc}", file=sys.stderr)
        return EXIT_USAGE

    from exporter.daemon import build as build_daemon
    from exporter.daemon import open_nvml

    try:
        session = open_nvml(settings)
    except NvmlUnavailable as exc:
        print(
            f"gpu-goodput-exporter: no usable NVIDIA driver: {exc}. "
            "To try the exporter without a GPU, run with --simulate.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    daemon = build_daemon(settings, session)
    if web_config.basic_auth is not None:
        web_config.basic_auth.on_failure = daemon.scheduler.metrics.count_auth_failures(
            webconfig.FAILURE_REASONS
        )
    from exporter.reload import Reloader, WebLayer

    web_layer = WebLayer(web_config)
    daemon.reload = Reloader(daemon, flags_to_tree(args), config_file, web_config_file, web_layer)
    host, port = parse_listen(settings.listen)
    log.info(
        "starting",
        version=__version__,
        backend=session.backend,
        listen=settings.listen,
        gpus=len(session.devices),
        node=settings.node_name,
    )
    try:
        where: dict[str, Any] = {"host": host or None, "port": port}
        if port == 0:  # HOST:0: bind a free port now, so the log can say which
            sock = bind_ephemeral(host)
            where = {"sock": sock}
            log.info("listening", address=address_of(sock), requested=settings.listen)
        web.run_app(
            daemon.app(middlewares=[web_layer.middleware]),
            ssl_context=web_config.ssl_context,
            print=None,
            shutdown_timeout=5.0,
            access_log=None,
            **where,
        )
    except OSError as exc:  # the port is taken, or the address is not ours
        print(
            f"gpu-goodput-exporter: cannot listen on {settings.listen}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    log.info("stopped")
    return 0
