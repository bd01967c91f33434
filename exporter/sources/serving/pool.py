"""The scrape slots, handed out by what each tenant has used, never by arrival order.

``serving.max_concurrency`` slots bound the scrapes in flight. Who gets a free slot is
decided by fair queueing over *tenants* (a discovered pod's namespace; a configured target
is a tenant of its own), then over the targets of a tenant:

- every tenant and every target is charged the slot-seconds its scrapes hold (a running
  scrape is charged as it runs). A waiting scrape of the tenant that used least goes
  first; a tenant that was idle comes back at most :attr:`ScrapePool.grace` seconds
  behind the busy ones, so an honest engine scraped in 10 ms goes ahead of any tenant
  whose pods hang, and a tenant cannot save credit for a burst. So a target's share of
  scrape time is bounded by what it costs, not by when it asked;
- a scrape that runs past ``overrun`` (half a round) needs one of the *long places*
  (half of the slots, :attr:`ScrapePool.long_size`), and a target whose last scrape ran
  that long asks for one before it starts. When the places are held, the holder whose
  tenant used most (by more than :data:`MARGIN`) is cut for a tenant that used less
  (``preempted``); when none used more, the scrape is cut at ``overrun``
  (``slow_share_full``). So the other half of the slots turns over every half round,
  and a target that was slow once is not sent behind every hung target: it is ahead of
  them by what they used;
- how long a scrape waited for its slot is measured (``waited``), and every limit that
  delays or drops a scrape is counted in :attr:`ScrapePool.limited`.

docs/security.md "A hung or slow target costs only its own tenant" states what this
guarantees and tests/test_fault_battery_fair2.py measures it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from exporter.sources.serving.scrape import Outcome

CUT_REASON = "slow_share_full"
PREEMPTED_REASON = "preempted"
QUEUED_REASON = "queued"
RESTING_REASON = "max_targets"
LIMITED_REASONS = (CUT_REASON, PREEMPTED_REASON, QUEUED_REASON, RESTING_REASON)
"""Why a scrape was delayed or dropped (``goodput_serving_scrapes_limited_total``): cut at
half a round with every long place held by tenants that used less (slow_share_full), cut
so that a tenant that used less could run (preempted), still waiting for a slot when its
next round came (queued), or not scraped this round because its place under
serving.max_targets went to another namespace in turn (max_targets)."""
MARGIN = 0.5
"""Slot-seconds a tenant must have used more than another before its long scrape is cut
for the other's: two tenants of equal use never cut each other back and forth."""


@dataclass
class _Share:
    """Slot-seconds one tenant (or one target of a tenant) has been charged."""

    used: float = 0.0
    running: list[_Running] = field(default_factory=list)
    waiting: int = 0

    def now(self, at: float) -> float:
        """Its use, its running scrapes charged up to ``at``."""
        return self.used + sum(at - r.started for r in self.running)

    @property
    def active(self) -> bool:
        return bool(self.running or self.waiting)


@dataclass
class _Tenant(_Share):
    targets: dict[str, _Share] = field(default_factory=dict)


@dataclass(eq=False)
class _Request:
    key: str
    tenant: str
    long: bool
    since: float
    granted: asyncio.Future[_Running]
    down: bool = False


@dataclass(eq=False)
class _Running:
    key: str
    tenant: str
    started: float
    long: bool
    down: bool = False
    """Its target is down (or never scraped): the scrape runs in the time others leave."""
    task: asyncio.Future[Outcome] | None = None
    preempted: bool = False
    holds: bool = True
    """Whether it still holds its slot (a preempted scrape hands it over at once)."""


class ScrapePool:
    """Slots for one serving source's scrapes (create it on the event loop that uses it)."""

    def __init__(
        self, size: int, grace: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.size = size
        self.long_size = max(size // 2, 1)
        """Slots that scrapes running past ``overrun`` may hold together (with one slot in
        all, that slot: a single slow engine must still be scraped)."""
        self.grace = grace
        """How far behind the busiest tenants an idle tenant comes back (one round)."""
        self._clock = clock
        self._tenants: dict[str, _Tenant] = {}
        self._waiting: list[_Request] = []
        self._running: list[_Running] = []
        self.limited: dict[str, int] = dict.fromkeys(LIMITED_REASONS, 0)
        """Scrapes delayed or dropped, by reason (counters)."""

    # public -----------------------------------------------------------------------------

    async def run(
        self,
        scrape: Callable[[], Awaitable[Outcome]],
        *,
        key: str,
        tenant: str,
        long: bool,
        overrun: float,
        cut: Callable[[str, str], Outcome],
        down: bool = False,
    ) -> Outcome:
        """``scrape()`` in a slot once fair queueing grants one; in a long place from the
        start when ``long``, else moved to one at ``overrun`` or cut (``cut(reason,
        error)`` gives the outcome). The scrape of a target that is ``down`` may be cut
        for a tenant that used less at any time. The outcome carries how long it waited."""
        asked = self._clock()
        entry = await self._wait(key, tenant, long, asked, down)
        waited = max(entry.started - asked, 0.0)
        task = asyncio.ensure_future(scrape())
        entry.task = task
        try:
            outcome = await self._finish(entry, task, overrun, cut)
        finally:
            if not task.done():  # cut, or the source closed: never leave it running
                task.cancel()
            self._release(entry)
        return replace(outcome, waited=waited)

    def overdue(self) -> int:
        """Count every scrape still waiting for a slot as delayed a round (``queued``);
        called once per round, before the round's scrapes are asked for."""
        self.limited[QUEUED_REASON] += len(self._waiting)
        return len(self._waiting)

    def backlogged(self, tenant: str) -> bool:
        """Whether ``tenant`` has scrapes waiting for a slot."""
        found = self._tenants.get(tenant)
        return found is not None and found.waiting > 0

    def forget(self, key: str, tenant: str) -> None:
        """A target gone: its charge goes, and its tenant's when it has no target left."""
        found = self._tenants.get(tenant)
        if found is None:
            return
        share = found.targets.get(key)
        if share is not None and not share.active:
            del found.targets[key]
        if not found.targets and not found.active:
            del self._tenants[tenant]

    def used(self, tenant: str) -> float:
        """Slot-seconds ``tenant`` has been charged (its running scrapes up to now)."""
        found = self._tenants.get(tenant)
        return found.now(self._clock()) if found is not None else 0.0

    # waiting and granting ---------------------------------------------------------------

    async def _wait(
        self, key: str, tenant: str, long: bool, asked: float, down: bool
    ) -> _Running:
        owner, share = self._share(tenant, key)
        loop = asyncio.get_running_loop()
        request = _Request(key, tenant, long, asked, loop.create_future(), down)
        owner.waiting += 1
        share.waiting += 1
        self._waiting.append(request)
        try:
            self._dispatch()
            return await request.granted
        except asyncio.CancelledError:
            if request.granted.done() and not request.granted.cancelled():
                self._release(request.granted.result())  # granted as it was cancelled
            raise
        finally:
            owner.waiting -= 1
            share.waiting -= 1
            if request in self._waiting:
                self._waiting.remove(request)

    def _share(self, tenant: str, key: str) -> tuple[_Tenant, _Share]:
        """The tenant's and the target's charges, an idle one caught up to ``grace``
        behind the least of the busy ones (fair queueing's virtual time)."""
        now = self._clock()
        owner = self._tenants.get(tenant)
        if owner is None:
            owner = self._tenants[tenant] = _Tenant()
        if not owner.active:
            busy = [t.now(now) for t in self._tenants.values() if t.active]
            if busy:
                owner.used = max(owner.used, min(busy) - self.grace)
        share = owner.targets.get(key)
        if share is None:
            share = owner.targets[key] = _Share()
        if not share.active:
            busy = [s.now(now) for s in owner.targets.values() if s.active]
            if busy:
                share.used = max(share.used, min(busy) - self.grace)
        return owner, share

    def _rank(self, tenant: str, key: str, at: float) -> tuple[float, float]:
        owner = self._tenants[tenant]
        return owner.now(at), owner.targets[key].now(at)

    def _dispatch(self) -> None:
        """Grant free slots (and long places) to waiting scrapes, least used first; a
        waiting long scrape may take the place of a long one whose tenant used more."""
        now = self._clock()
        ranked = sorted(
            self._waiting, key=lambda r: (*self._rank(r.tenant, r.key, now), r.since)
        )
        for request in ranked:
            if request.granted.done():
                continue
            free = self.size - self._holding()
            if request.long:
                places = self._long_holding() < self.long_size
                if free > 0 and places:
                    self._grant(request, now)
                    continue
                # no long place: one held by a tenant that used more; a place but no
                # slot: the slot of any scrape a fast request could cut
                victim = self._victim(request.tenant, request.key, now, long=not places)
            elif free > 0:
                self._grant(request, now)
                continue
            else:
                victim = self._victim(request.tenant, request.key, now, long=False)
            if victim is not None:
                self._preempt(victim)
                self._grant(request, now)

    def _grant(self, request: _Request, now: float) -> None:
        entry = _Running(request.key, request.tenant, now, request.long, request.down)
        self._running.append(entry)
        owner = self._tenants[request.tenant]
        owner.running.append(entry)
        owner.targets[request.key].running.append(entry)
        request.granted.set_result(entry)

    def _holding(self) -> int:
        return sum(1 for r in self._running if r.holds)

    def _long_holding(self) -> int:
        return sum(1 for r in self._running if r.holds and r.long)

    def _victim(self, tenant: str, key: str, now: float, long: bool) -> _Running | None:
        """The scrape to cut for ``tenant``'s: of those in a long place (when ``long``:
        a long place is wanted) or of a target that is down, the one whose tenant (or,
        within one tenant, whose target) used most, if more than ``tenant``'s by
        :data:`MARGIN`. A scrape of a target that is up and not past its half round is
        never cut."""
        mine = self._rank(tenant, key, now)
        worst: tuple[tuple[float, float], _Running] | None = None
        for entry in self._running:
            if not entry.holds or not (entry.long or (entry.down and not long)):
                continue
            rank = self._rank(entry.tenant, entry.key, now)
            if entry.tenant == tenant:
                more = entry.key != key and rank[1] > mine[1] + MARGIN
            else:
                more = rank[0] > mine[0] + MARGIN
            if more and (worst is None or rank > worst[0]):
                worst = (rank, entry)
        return worst[1] if worst is not None else None

    def _preempt(self, victim: _Running) -> None:
        """Cut ``victim``: its slot and long place go to the caller at once."""
        victim.preempted = True
        victim.holds = False
        self.limited[PREEMPTED_REASON] += 1
        if victim.task is not None:
            victim.task.cancel()

    # running ----------------------------------------------------------------------------

    async def _finish(
        self, entry: _Running, task: asyncio.Future[Outcome], overrun: float,
        cut: Callable[[str, str], Outcome],
    ) -> Outcome:
        """``task``'s outcome: at once when done by ``overrun`` (or when it started in a
        long place), else after moving into a long place (free, or taken from a tenant
        that used more), else ``cut``."""
        if not entry.long:
            done, _ = await asyncio.wait({task}, timeout=overrun)
            if not done and not entry.preempted and not self._promote(entry):
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                self.limited[CUT_REASON] += 1
                return cut(
                    CUT_REASON,
                    f"cut after {overrun:.2g}s: the {self.long_size} slots long scrapes "
                    f"may hold (half of serving.max_concurrency {self.size}) are held "
                    "by tenants that used less",
                )
        await asyncio.gather(task, return_exceptions=True)
        if entry.preempted or task.cancelled():
            return cut(
                PREEMPTED_REASON,
                f"cut after {self._clock() - entry.started:.2g}s for a tenant that used "
                "less of the scrape slots",
            )
        exc = task.exception()
        if exc is not None:
            raise exc
        return task.result()

    def _promote(self, entry: _Running) -> bool:
        """Move a scrape that ran past ``overrun`` into a long place: a free one, or one
        taken from a tenant that used more. False when neither."""
        now = self._clock()
        if self._long_holding() < self.long_size:
            entry.long = True
            return True
        victim = self._victim(entry.tenant, entry.key, now, long=True)
        if victim is None:
            return False
        self._preempt(victim)
        entry.long = True
        return True

    def _release(self, entry: _Running) -> None:
        """A scrape ended: it is charged what it held, and its slot goes to the next."""
        if entry not in self._running:
            return
        self._running.remove(entry)
        owner = self._tenants.get(entry.tenant)
        if owner is not None:
            held = max(self._clock() - entry.started, 0.0)
            owner.running.remove(entry)
            owner.used += held
            share = owner.targets.get(entry.key)
            if share is not None:
                share.running.remove(entry)
                share.used += held
        entry.holds = False
        self._dispatch()
