"""Command line: parse flags, resolve settings, wire the daemon, serve. Nothing else."""

from __future__ import annotations

import argparse
import difflib
import errno
import os
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any, Literal, get_args, get_origin

import structlog
from aiohttp import web
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from exporter import __version__
from exporter.collectors.base import Flag
from exporter.process.interpreter import shorten_switch_interval
from exporter.process.logging import configure
from exporter.process.memory import tune_malloc
from exporter.settings.argparser import EXIT_USAGE as EXIT_USAGE
from exporter.settings.argparser import Parser
from exporter.settings.devices import DeviceSelectionError
from exporter.sources.nvml_session import NvmlSession, NvmlUnavailable
from exporter.web import webconfig
from exporter.web.server import address_of, bind
from exporter.wiring.config import ConfigError, Settings, build, ignored_env, parse_listen
from exporter.wiring.startup import announcer

MAX_ENV_NAMES = 64
MAX_ENV_NAME_CHARS = 128
"""Ignored ``GOODPUT_*`` variables named in the warning: at most this many, each cut."""


FLAGS: tuple[Flag, ...] = (
    Flag("--listen", "listen", "HOST:PORT"),
    Flag("--simulate", "simulate"),
    Flag("--simulate-gpus", "simulate_gpus", "N"),
    Flag("--simulate-engines", "simulate_engines"),
    Flag("--interval", "interval", "SECONDS"),
    Flag("--node-name", "node_name", "NAME"),
    Flag("--devices", "devices", "LIST"),
    Flag("--log-format", "log_format"),
    Flag("--log-level", "log_level"),
    Flag("--extended-metrics", "extended_metrics"),
    Flag("--no-debug-state", "debug_state", negate=True),
)
"""The daemon's own flags (keys of ``CoreSettings``); each collector declares its own
(``Collector.flags``, keys of its section) and :func:`parser` adds them in its group."""


def parser() -> argparse.ArgumentParser:
    """All flags. A ``dest`` of ``section__key`` sets the nested settings key."""
    p = Parser(
        prog="gpu-goodput-exporter",
        description="Prometheus exporter that tells whether GPUs do useful work.",
        argument_default=argparse.SUPPRESS,
        epilog="Each setting flag names its environment variable in [brackets] (nested keys: "
        "GOODPUT_SECTION__KEY, values parsed as YAML) and has the same key in the --config "
        "YAML file; flags win over the environment, which wins over the file. GOODPUT_* "
        "variables that name no setting are ignored with a warning. "
        "'gpu-goodput-exporter top --help': a live terminal view of a running exporter.",
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
    for flag in FLAGS:
        _add_flag(p, flag, "")
    add_section_flags(p)
    add_collector_flags(p)
    _name_env_vars(p)
    return p


def add_section_flags(p: argparse.ArgumentParser) -> None:
    """Every collector's flags, in one group per collector, keys under its section."""
    from exporter.collectors import REGISTRY

    for c in REGISTRY:
        if c.flags:
            group = p.add_argument_group(c.flag_group or c.name)
            for flag in c.flags:
                _add_flag(group, flag, c.section)


def _field(key: str) -> FieldInfo:
    model: Any = Settings
    *sections, name = key.split(".")
    for section in sections:
        model = model.model_fields[section].annotation
    info: FieldInfo = model.model_fields[name]
    return info


def _add_flag(group: Any, flag: Flag, section: str) -> None:
    """One flag, typed and documented from its settings field (``section.key``)."""
    key = f"{section}.{flag.key}" if section else flag.key
    info = _field(key)
    kind = info.annotation
    text = " ".join((info.description or "").replace("``", "").split()).replace("%", "%%")
    text = text.rstrip(".")
    kw: dict[str, Any] = {"dest": key.replace(".", "__"), "help": text}
    if flag.negate:
        kw.update(action="store_false", help=f"do not {text[:1].lower()}{text[1:]}")
    elif kind is bool:
        kw.update(action="store_true")
    else:
        if get_origin(kind) is list:
            kw["action"] = "append"
            if "repeatable" not in text:
                kw["help"] += " (repeatable)"
        elif get_origin(kind) is Literal:
            kw["choices"] = list(get_args(kind))
        elif kind in (int, float):
            kw["type"] = kind
        default = info.get_default(call_default_factory=False)
        if default not in (None, "", PydanticUndefined) and get_origin(kind) is not list:
            kw["help"] += f" (default {default})"
        if flag.metavar:
            kw["metavar"] = flag.metavar
    group.add_argument(flag.flag, **kw)


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


def setting_env_names(model: Any = Settings, prefix: str = "GOODPUT_") -> list[str]:
    """Every environment variable that names a setting (nested: ``GOODPUT_SECTION__KEY``)."""
    out = []
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            out += setting_env_names(kind, f"{prefix}{name.upper()}__")
        else:
            out.append(f"{prefix}{name.upper()}")
    return out


def did_you_mean(ignored: Sequence[str]) -> dict[str, dict[str, str]]:
    """``{"did_you_mean": {"GOODPUT_INTERVL": "GOODPUT_INTERVAL"}}`` for likely typos (a
    service link such as GOODPUT_PORT_9433_TCP resembles nothing and is left out)."""
    known = [*setting_env_names(), "GOODPUT_CONFIG", "GOODPUT_WEB_CONFIG_FILE"]
    found = {}
    for name in ignored:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if close:
            found[name] = close[0]
    return {"did_you_mean": found} if found else {}


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


def listen(where: str, log: Any) -> list[socket.socket] | None:
    """Bind ``--listen`` now, or say in one line why not (None)."""
    host, port = parse_listen(where)
    try:
        sockets = bind(host, port)
    except OSError as exc:  # the port is taken, or the address is not ours
        hint = ("; another process holds it: choose another with --listen HOST:PORT "
                "(make run LISTEN=HOST:PORT)" if exc.errno == errno.EADDRINUSE else "")
        print(f"gpu-goodput-exporter: cannot listen on {where}: {exc.strerror or exc}{hint}",
              file=sys.stderr)
        return None
    if port == 0:  # HOST:0: the port the kernel picked, for whoever started us
        log.info("listening", address=address_of(sockets[0]), requested=where)
    return sockets


def simulated_app(gpus: int) -> web.Application:
    """The simulated node's whole daemon as an aiohttp app, for ``top --simulate`` (the view
    is handed this, so it never imports the daemon)."""
    from exporter.wiring.daemon import build as build_daemon

    settings = build({"simulate": True, "simulate_gpus": gpus, "log_level": "error"})
    return build_daemon(settings, NvmlSession.open_for(settings)).app()


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["top"]:  # the live terminal view: its own flags, no daemon settings
        from exporter.view.top import main as top

        return top(argv[1:], simulated_app=simulated_app)
    args = parser().parse_args(argv)
    tree = flags_to_tree(args)
    try:
        config_file = getattr(args, "config", None) or os.environ.get("GOODPUT_CONFIG")
        settings = build(tree, config_file=config_file)
    except ConfigError as exc:
        print(f"gpu-goodput-exporter: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # SIGHUP before the reload handler is in place must not end the process (its default).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    tune_malloc()
    shorten_switch_interval()
    configure(settings.log_format, settings.log_level)
    log = structlog.get_logger("main")
    # Variable names are input too: a few, each cut, reach the log line.
    ignored = [name[:MAX_ENV_NAME_CHARS] for name in ignored_env(os.environ)][:MAX_ENV_NAMES]
    if ignored:
        log.warning(
            "environment_variables_ignored",
            names=ignored,
            reason="GOODPUT_* variables that name no setting (e.g. Kubernetes service links)",
            **did_you_mean(ignored),
        )
    web_config_file = getattr(args, "web_config_file", None) or os.environ.get(
        "GOODPUT_WEB_CONFIG_FILE"
    )
    try:
        web_config = webconfig.load(web_config_file)
    except webconfig.WebConfigError as exc:
        print(f"gpu-goodput-exporter: {exc}", file=sys.stderr)
        return EXIT_USAGE
    sockets = listen(settings.listen, log)  # first: a taken port is the only thing said
    if sockets is None:
        return EXIT_USAGE
    if settings.simulate_engines:
        try:
            tree, settings = with_simulated_engines(tree, config_file, settings.simulate_gpus)
        except (OSError, ConfigError) as exc:
            print(f"gpu-goodput-exporter: {exc}", file=sys.stderr)
            return EXIT_USAGE
    return _run(tree, settings, (config_file, web_config_file), web_config, sockets)


def with_simulated_engines(tree: dict[str, Any], config_file: str | None, gpus: int) -> tuple[
    dict[str, Any], Settings
]:
    """Start the simulated serving engines of the node's first ``gpus`` GPUs; the flags with
    their targets, and the settings (a reload keeps the targets: they are flags to it)."""
    from exporter.sim import engines

    wanted = tuple(e for e in engines.ENGINES if int(e.gpu) < gpus)
    tree = {**tree, "serving": {**tree.get("serving", {}), "targets": engines.start(wanted)}}
    return tree, build(tree, config_file=config_file)


def _run(
    tree: dict[str, Any],
    settings: Settings,
    files: tuple[str | None, str | None],
    web_config: webconfig.WebConfig,
    sockets: list[socket.socket],
) -> int:
    """Build the daemon (NVML opens here, when the first collector that reads it is built),
    wire the reload, serve until stopped."""
    from exporter.wiring.daemon import build as build_daemon

    try:
        daemon = build_daemon(settings)
    except NvmlUnavailable as exc:
        print(
            f"gpu-goodput-exporter: no usable NVIDIA driver: {exc}. "
            "To try the exporter without a GPU, run with --simulate.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except DeviceSelectionError as exc:
        print(f"gpu-goodput-exporter: --devices: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if web_config.basic_auth is not None:
        web_config.basic_auth.on_failure = daemon.scheduler.metrics.count_auth_failures(
            webconfig.FAILURE_REASONS
        )
    from exporter.wiring.reload import Reloader, WebLayer

    web_layer = WebLayer(web_config)
    daemon.reload = Reloader(daemon, tree, *files, web_layer)
    app = daemon.app(middlewares=[web_layer.middleware])
    app.on_startup.append(announcer(settings, lambda: daemon.store.current, daemon.shared.backend,
                                    sockets, web_config.ssl_context is not None))
    web.run_app(app, ssl_context=web_config.ssl_context, print=None, shutdown_timeout=5.0,
                access_log=None, sock=sockets)
    structlog.get_logger("main").info("stopped")
    exit_within(EXIT_GRACE_S)
    return 0


EXIT_GRACE_S = 3.0
"""Seconds the interpreter may take to exit once the daemon has stopped. A thread stuck
in the kernel (an NVML call on a wedged GPU) must not turn SIGTERM into SIGKILL: after
this, the process ends without waiting for it (docs/security.md, "Reads that never
return")."""


def exit_within(seconds: float, code: int = 0) -> None:
    """End the process ``seconds`` from now if the interpreter has not exited by then
    (it waits for every non-daemon thread, however stuck)."""
    import threading

    def force() -> None:
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(code)

    timer = threading.Timer(seconds, force)
    timer.daemon = True
    timer.start()
