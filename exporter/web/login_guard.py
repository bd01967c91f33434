"""Keeps a flood of wrong passwords from starving a real scrape, and from going unseen.

bcrypt is slow on purpose (about 65 ms a check at cost 10), so a few hundred guesses a
second queue up behind each other; a scraper whose first request waits behind them misses
its scrape. :class:`CheckPool` runs checks on a small thread pool and serves waiting checks of
clients without a recent failure first, then the others; the wait is bounded, and a check
that finds it full is refused at once (``throttled``) instead of waiting. A client is
its address, so a flood from the scraper's own address competes with the scraper itself.
:class:`FailureLog` remembers failures per client in a bounded map, so each client is
logged at most once a minute whatever it sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

FAILURE_REASONS = ("missing", "malformed", "wrong_credentials", "throttled")
"""Why a request failed basic auth: the only label values the failure counter takes."""

QUIET_SECONDS = 60.0
"""A client is logged at most once in this long, and counts as suspect for this long."""
MAX_CLIENTS = 1024
"""Clients remembered; the least recently failed one is forgotten first."""


@dataclass
class _Client:
    last_failure: float
    last_logged: float
    unlogged: int = 0


class FailureLog:
    """Failures per client address, bounded; says when a client is due a log line."""

    def __init__(
        self,
        capacity: int = MAX_CLIENTS,
        quiet: float = QUIET_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clients: OrderedDict[str, _Client] = OrderedDict()
        self._capacity = capacity
        self._quiet = quiet
        self._clock = clock

    def __len__(self) -> int:
        return len(self._clients)

    def failed(self, client: str) -> int:
        """Record one failure; the failures to report in a log line now, or 0 for none."""
        now = self._clock()
        entry = self._clients.get(client)
        if entry is None:
            entry = self._clients[client] = _Client(now, -float("inf"))
            while len(self._clients) > self._capacity:
                self._clients.popitem(last=False)
        self._clients.move_to_end(client)
        entry.last_failure = now
        entry.unlogged += 1
        if now - entry.last_logged < self._quiet:
            return 0
        entry.last_logged, count, entry.unlogged = now, entry.unlogged, 0
        return count

    def suspect(self, client: str) -> bool:
        """Whether ``client`` failed within the quiet period."""
        entry = self._clients.get(client)
        return entry is not None and self._clock() - entry.last_failure < self._quiet


class CheckPool:
    """Runs blocking checks on ``workers`` threads. Checks beyond that wait: a suspect
    client's only while fewer than ``max_waiting`` wait, a clean client's up to twice that
    (room kept for it), and a freed thread takes the oldest check of a client that is not
    suspect at that moment, else the oldest check."""

    def __init__(
        self, suspect: Callable[[str], bool], workers: int = 2, max_waiting: int = 16
    ) -> None:
        self._suspect = suspect
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="bcrypt")
        self._workers = workers
        self._max_waiting = max(1, max_waiting)
        self._running = 0
        self._waiting: list[tuple[str, asyncio.Future[None]]] = []

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def run(self, check: Callable[[], bool], client: str) -> bool | None:
        """``check()``'s answer, or None when refused because too many checks wait."""
        loop = asyncio.get_running_loop()
        if self._running < self._workers:
            self._running += 1
        else:
            room = self._max_waiting * (1 if self._suspect(client) else 2)
            if len(self._waiting) >= room:
                return None
            turn: asyncio.Future[None] = loop.create_future()
            entry = (client, turn)
            self._waiting.append(entry)
            try:
                await turn  # _release hands this check a running slot
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self._release()  # handed a slot just as the client went away
                else:
                    with contextlib.suppress(ValueError):  # _release may have dropped it
                        self._waiting.remove(entry)
                raise
        work = loop.run_in_executor(self._pool, check)
        # The slot is freed when the thread finishes, even if the client went away first.
        work.add_done_callback(lambda _: self._release())
        return await asyncio.shield(work)

    def _release(self) -> None:
        self._waiting = [(c, t) for c, t in self._waiting if not t.done()]
        if not self._waiting:
            self._running -= 1
            return
        index = next(
            (i for i, (client, _) in enumerate(self._waiting) if not self._suspect(client)), 0
        )
        _, turn = self._waiting.pop(index)
        turn.set_result(None)  # the slot passes on: _running stays

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
