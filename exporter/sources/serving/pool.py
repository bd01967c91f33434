"""The scrape slots, shared so that no set of targets can hold all of them.

``serving.max_concurrency`` slots bound the scrapes in flight. A hung target would hold a
slot for its whole timeout, so eight hung targets held all eight and every honest target
waited behind them. Here a slot is held long only by a *slow* scrape, and slow scrapes
share half of the pool (:attr:`ScrapePool.slow_size`):

- every target has at most one scrape in flight (the source starts none while one runs);
- a scrape that outlasts half a round (``overrun``) keeps going only when a place in the
  slow share is free at once, else it is cut there (reason ``slow_share_full``, counted
  in :attr:`ScrapePool.limited`);
- a target whose last scrape was slow waits for a place in the slow share before it takes
  a slot, so it never holds one of the fast half;
- the pods of one namespace (an *owner*) hold at most half of the slots at once; a scrape
  that waits for its namespace's share is counted (``namespace_share_full``).

So the fast half of the pool turns over at least every half round, and an honest target
is scraped on its schedule whatever the others do (docs/security.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager

from exporter.sources.serving.scrape import Outcome

CUT_REASON = "slow_share_full"
OWNER_REASON = "namespace_share_full"
LIMITED_REASONS = (CUT_REASON, OWNER_REASON)
"""Why the pool held a scrape back (``goodput_serving_scrapes_limited_total``)."""


class ScrapePool:
    """Slots for one serving source's scrapes (create it on the event loop that uses it)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.slow_size = max(size // 2, 1)
        """Slots that scrapes running past ``overrun`` may hold together (with one slot in
        all, that slot: a single slow engine must still be scraped)."""
        self.owner_size = max(1, size // 2)
        """Slots one owner (a namespace's pods) may hold together."""
        self._slots = asyncio.Semaphore(size)
        self._slow = asyncio.Semaphore(self.slow_size)
        self._owners: dict[str, _Gate] = {}
        self.limited: dict[str, int] = dict.fromkeys(LIMITED_REASONS, 0)
        """Scrapes held back, by reason (counters): cut at ``overrun`` because the slow
        share was full, or waiting because their namespace held its share."""

    async def run(
        self,
        scrape: Callable[[], Awaitable[Outcome]],
        *,
        slow: bool,
        overrun: float,
        owner: str = "",
        cut: Callable[[str], Outcome],
    ) -> Outcome:
        """``scrape()`` in a slot: in the slow share from the start when ``slow``, else
        moved there at ``overrun`` or cut (``cut(error)`` gives the outcome)."""
        async with AsyncExitStack() as held:
            if owner:
                await held.enter_async_context(self._owner(owner))
            if slow:
                await held.enter_async_context(self._slow)
                await held.enter_async_context(self._slots)
                return await scrape()
            await held.enter_async_context(self._slots)
            task = asyncio.ensure_future(scrape())
            try:
                return await self._move_or_cut(held, task, overrun, cut)
            finally:
                if not task.done():  # the source closed (or a bug): never leave it running
                    task.cancel()

    async def _move_or_cut(
        self, held: AsyncExitStack, task: asyncio.Future[Outcome], overrun: float,
        cut: Callable[[str], Outcome],
    ) -> Outcome:
        """``task``'s outcome: at once when done by ``overrun``, else after moving into
        the slow share if it has a place free now, else ``cut``."""
        done, _ = await asyncio.wait({task}, timeout=overrun)
        if done:
            return task.result()
        if not self._slow.locked():
            await held.enter_async_context(self._slow)  # free: no wait
            return await task
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        self.limited[CUT_REASON] += 1
        return cut(
            f"cut after {overrun:.2g}s: the {self.slow_size} slots slow scrapes may "
            f"hold (half of serving.max_concurrency {self.size}) are held"
        )

    @asynccontextmanager
    async def _owner(self, owner: str) -> AsyncIterator[None]:
        """One of ``owner``'s slots; its gate lives while a scrape of it waits or runs."""
        gate = self._owners.get(owner)
        if gate is None:
            gate = self._owners[owner] = _Gate(self.owner_size)
        gate.users += 1
        if gate.semaphore.locked():
            self.limited[OWNER_REASON] += 1
        try:
            async with gate.semaphore:
                yield
        finally:
            gate.users -= 1
            if not gate.users:
                self._owners.pop(owner, None)


class _Gate:
    __slots__ = ("semaphore", "users")

    def __init__(self, size: int) -> None:
        self.semaphore = asyncio.Semaphore(size)
        self.users = 0
