"""Command line: parse flags, resolve settings, wire the daemon, serve. Nothing else."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import structlog
from aiohttp import web

from exporter import __version__
from exporter.config import DEFAULT_PORT, ConfigError, build, parse_listen
from exporter.logging import configure
from exporter.sources.nvml_session import NvmlUnavailable

EXIT_USAGE = 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-goodput-exporter",
        description="Prometheus exporter that tells whether GPUs do useful work.",
        argument_default=argparse.SUPPRESS,
        epilog="Every flag has an environment variable GOODPUT_<NAME> (nested keys: "
        "GOODPUT_SECTION__KEY) and a key in the --config YAML file; flags win over the "
        "environment, which wins over the file.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--config", metavar="FILE", help="YAML configuration file")
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"address to serve /metrics on (default :{DEFAULT_PORT})",
    )
    p.add_argument(
        "--simulate",
        action="store_true",
        help="run on the built-in simulated 8-GPU node instead of NVML",
    )
    p.add_argument(
        "--simulate-gpus",
        type=int,
        dest="simulate_gpus",
        metavar="N",
        help="number of simulated GPUs (default 8)",
    )
    p.add_argument(
        "--interval", type=float, metavar="SECONDS", help="GPU poll interval (default 1)"
    )
    p.add_argument(
        "--node-name",
        dest="node_name",
        metavar="NAME",
        help="value of the node label (default $NODE_NAME or the hostname)",
    )
    p.add_argument(
        "--log-format",
        dest="log_format",
        choices=["json", "console"],
        help="log format (default json)",
    )
    p.add_argument(
        "--log-level",
        dest="log_level",
        choices=["debug", "info", "warning", "error"],
        help="default info",
    )
    p.add_argument(
        "--profiling",
        dest="profiling_mode",
        choices=["auto", "gpm", "dcgm", "dcgm-exporter", "off"],
        help="profiling counter source; auto picks GPM on Hopper and newer (default auto)",
    )
    return p


def flags_to_tree(ns: argparse.Namespace) -> dict[str, Any]:
    """Flat argparse results to the nested settings tree."""
    flat = vars(ns).copy()
    flat.pop("config", None)
    tree: dict[str, Any] = {}
    nested = {"profiling_mode": ("profiling", "mode")}
    for key, value in flat.items():
        if key in nested:
            section, name = nested[key]
            tree.setdefault(section, {})[name] = value
        else:
            tree[key] = value
    return tree


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = build(flags_to_tree(args), config_file=getattr(args, "config", None))
    except ConfigError as exc:
        print(f"gpu-goodput-exporter: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    configure(settings.log_format, settings.log_level)
    log = structlog.get_logger("main")

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
    host, port = parse_listen(settings.listen)
    log.info(
        "starting",
        version=__version__,
        backend=session.backend,
        listen=settings.listen,
        gpus=len(session.devices),
        node=settings.node_name,
    )
    web.run_app(
        daemon.app(),
        host=host or None,
        port=port,
        print=None,
        shutdown_timeout=5.0,
        access_log=None,
    )
    log.info("stopped")
    return 0
