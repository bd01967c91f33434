"""A line on the terminal while one test runs long. ``make test`` runs ``pytest -q``, whose dots
stop for minutes while a fixture waits on live servers (the live VictoriaMetrics side by side
waits four), and a first run must never look hung: every HEARTBEAT_S without a finished test
it names the test, how long it has run and how far the run is.

The line goes to a copy of the terminal's stdout taken when pytest configures (capture is
suspended then), so it is never captured into a test's output; tests/conftest.py wires it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import IO

HEARTBEAT_S = 20.0
"""The bar is a line at least every 30 s."""


class Heartbeat:
    """Which test runs and since when; a daemon thread says so while one runs long."""

    def __init__(self, out: IO[str], every: float = HEARTBEAT_S, owned: bool = False) -> None:
        self.out = out
        self._owned = owned  # closed with the heartbeat
        self.every = every
        self.total = 0
        self.done = 0
        self.current = ""
        self.began = self.since = self.said = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    @classmethod
    def on_terminal(cls) -> Heartbeat:
        """Writing to a duplicate of file descriptor 1 as it is now."""
        return cls(os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace"),
                   owned=True)

    def started(self, nodeid: str) -> None:
        with self._lock:
            self.current, self.since = nodeid, time.monotonic()
            self.said = self.since

    def finished(self) -> None:
        with self._lock:
            self.done += 1
            self.current = ""

    def line(self, now: float) -> str:
        """What it says about the test running now."""
        minutes, seconds = divmod(int(now - self.began), 60)
        return (f"\n[still on {self.current}: {now - self.since:.0f} s; {self.done} of "
                f"{self.total} tests done, {minutes}:{seconds:02d} in]\n")

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self.every / 4)):
            with self._lock:
                now = time.monotonic()
                if not self.current or now - self.said < self.every:
                    continue
                self.said = now
                text = self.line(now)
            try:
                self.out.write(text)
                self.out.flush()
            except (OSError, ValueError):
                return  # the terminal is gone: nothing to tell

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._owned:
            with contextlib.suppress(OSError):
                self.out.close()
