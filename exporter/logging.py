"""structlog set-up: JSON lines by default (for log pipelines), console on request."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(log_format: str = "json", level: str = "info") -> None:
    renderer: structlog.typing.Processor
    if log_format == "console":
        # Fields in the order the code gives them (the URL first on the start-up line).
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), sort_keys=False)
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
