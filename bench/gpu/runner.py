"""The one ``main()`` of the GPU orchestrators (diagnosis.py, gpu_validation.py): parse the
arguments, build the run, turn SIGTERM into a clean stop, and always close it.

A run keeps what it measured in a JSON file it rewrites as it goes, so whatever stops it
(the end, Ctrl-C, SIGTERM from a lent machine's time limit) must pass through ``close()``:
the daemon is stopped and the JSON saved.
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar


class Run(Protocol):
    def run(self) -> None: ...
    def close(self) -> None: ...
    def say(self, msg: str) -> None: ...


R = TypeVar("R", bound=Run)


def now() -> str:
    """Wall-clock time for a run's ``started``/``finished`` fields."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def main(parser: argparse.ArgumentParser, start: Callable[[argparse.Namespace], R],
         finish: Callable[[R], None], argv: Sequence[str] | None = None) -> int:
    """``start(args)`` builds the run; it runs to its end or an interrupt, is closed either
    way, and ``finish(run)`` prints what it wrote."""
    run = start(parser.parse_args(argv))

    def _terminate(*_: Any) -> None:
        raise KeyboardInterrupt  # unwinds into close(): daemon stopped, JSON saved

    signal.signal(signal.SIGTERM, _terminate)
    try:
        run.run()
    except KeyboardInterrupt:
        run.say("interrupted")
    finally:
        run.close()
    finish(run)
    return 0
