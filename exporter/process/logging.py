"""structlog set-up: JSON lines by default (for log pipelines), console on request.

Every line passes the damper (``exporter/process/logdamp.py``), and the standard-library loggers
of aiohttp's server and asyncio are bridged into it: a request aiohttp cannot parse is one
JSON line (``http_request_malformed``, rate-limited per client), never a traceback.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

from exporter.process.logdamp import BYTES, DAMPER

BRIDGED = ("aiohttp.server", "aiohttp.web", "asyncio")
"""Standard-library loggers whose records become one structured line each."""
MAX_ERROR_CHARS = 200


def configure(log_format: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    renderer: structlog.typing.Processor
    out = stream if stream is not None else sys.stderr
    if log_format == "console":
        # Fields in the order the code gives them (the URL first on the start-up line).
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty(), sort_keys=False)
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            DAMPER,
            BYTES,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
    bridge()


def _fields(record: logging.LogRecord) -> tuple[str, dict[str, Any]]:
    """The event name and fields of a bridged record."""
    exc = record.exc_info[1] if record.exc_info else None
    error = " ".join(f"{type(exc).__name__}: {exc}".split()) if exc else ""
    fields: dict[str, Any] = {"logger": record.name}
    if record.msg == "Error handling request from %s" and record.args:
        event = "http_request_malformed"
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        fields["client"] = str(args[0])
    elif record.name.startswith("aiohttp"):
        event = "http_server_error"
        fields["message"] = " ".join(record.getMessage().split())[:MAX_ERROR_CHARS]
    else:
        event = "asyncio_error"
        fields["message"] = " ".join(record.getMessage().split())[:MAX_ERROR_CHARS]
    if error:
        fields["error"] = error[:MAX_ERROR_CHARS]
    return event, fields


class Bridge(logging.Handler):
    """A standard-library record as one structlog line: no traceback, a short error."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event, fields = _fields(record)
            log = structlog.get_logger(record.name)
            if record.levelno >= logging.ERROR and event != "http_request_malformed":
                log.error(event, **fields)
            elif record.levelno >= logging.WARNING or event == "http_request_malformed":
                log.warning(event, **fields)
        except Exception:  # a log line must never raise into aiohttp
            pass


def bridge() -> None:
    """Route :data:`BRIDGED` loggers through structlog (and the damper), once."""
    for name in BRIDGED:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if isinstance(handler, Bridge):
                logger.removeHandler(handler)
        logger.addHandler(Bridge())
        logger.propagate = False
        logger.setLevel(logging.WARNING)
