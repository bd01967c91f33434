"""The serving source: scrapes every target concurrently and publishes per-GPU signals.

Each cycle reads the current targets and starts a scrape task for every target that has
none in flight, each in a slot of a pool no set of targets can hold whole
(exporter/sources/serving/pool.py). It waits for them at most ``timeout`` (and at most
the interval), and never for a target whose last scrape outlasted a round: a hung or slow
target's task runs on and is collected by a later cycle, so it never delays another
target's publish. It then attributes every reading to GPUs from the views
it was given (inventory, pod devices, NVML processes) and hands it to
exporter/sources/serving/account.py, which turns engine counters into reset-proof per-GPU
totals. Target health is published per target at node scope.

Everything kept about a target lives in one
:class:`~exporter.sources.serving.state.TargetState` (keyed by its normalised URL), so
adding, reloading and forgetting a target is one operation; its
:class:`~exporter.sources.serving.accumulate.Ledger` bounds what the engine can add (model
cap, label length, physical ceiling) before anything becomes a series or a count.
"""

from __future__ import annotations

import asyncio
import time
from asyncio import FIRST_COMPLETED
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import aiohttp
import structlog

from exporter import urls
from exporter.readings import (
    Device,
    PodAssignments,
    ProcessInfo,
    ServingState,
    TargetStatus,
)
from exporter.snapshot import SourceResult
from exporter.sources.base import Source
from exporter.sources.serving import procfs
from exporter.sources.serving.account import Accounts, Gauges
from exporter.sources.serving.accumulate import Ledger, Limits
from exporter.sources.serving.adapter import Reading
from exporter.sources.serving.attribution import NONE, Attribution, PodGpus, resolve
from exporter.sources.serving.config import ServingConfig
from exporter.sources.serving.discovery import PodWatcher
from exporter.sources.serving.fetch import MODELS_MAX_BYTES, models_id
from exporter.sources.serving.pool import (
    CUT_REASON,
    LIMITED_REASONS,
    PREEMPTED_REASON,
    RESTING_REASON,
    ScrapePool,
)
from exporter.sources.serving.scrape import Outcome, scrape
from exporter.sources.serving.state import TargetState
from exporter.sources.serving.targets import Target, TargetProvider, TargetSet, static_targets

log = structlog.get_logger("serving")

PID_REFRESH_SECONDS = 60.0
WAIT_FLOOR = 1.0
"""A round waits at least this long (capped by the timeout) for targets not known slow."""
ROUND_RECHECK = 0.05
"""How often a round waiting for scrapes looks again at which tenants are queued."""
TIMEOUT_MARGIN = 0.1
"""A scrape's own timeout fires this much before a round stops waiting for it."""


class ServingSource(Source):
    name = "serving"

    def __init__(
        self,
        config: ServingConfig,
        targets: TargetProvider,
        *,
        inventory: Callable[[], Sequence[Device]] = tuple,
        processes: Callable[[], Sequence[ProcessInfo]] = tuple,
        pods: Callable[[], PodAssignments] = PodAssignments,
        proc_root: Path = Path("/proc"),
        discovery: PodWatcher | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = config.interval
        self._config = config
        self._limits = Limits.of(config)
        self._targets = targets
        self._inventory = inventory
        self._processes = processes
        self._pods = pods
        self._proc = proc_root
        self._discovery = discovery
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._pool: ScrapePool | None = None
        self._states: dict[str, TargetState] = {}
        """Target key (normalised URL) -> all that is kept about it."""
        self._accounts = Accounts()

    def reconfigure(self, config: ServingConfig) -> None:
        """A reloaded serving section: its static targets, bounds and timings apply from
        the next poll; targets no longer listed are forgotten there, with their series."""
        if isinstance(self._targets, TargetSet):
            self._targets.replace_static(
                static_targets(config), config.max_targets, config.max_targets_per_namespace
            )
        self._config = config
        self.interval = config.interval
        self._limits = Limits.of(config)
        for state in self._states.values():
            state.ledger.limits = self._limits
        if self._pool is not None:
            self._pool.grace = self._wait_budget()

    async def start(self) -> None:
        if self._discovery is not None and not self._discovery.started:
            self._discovery.start()
        if self._pool is None:
            self._pool = ScrapePool(self._config.max_concurrency, grace=self._wait_budget())
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._config.max_concurrency),
                timeout=aiohttp.ClientTimeout(total=None),
            )

    async def close(self) -> None:
        if self._discovery is not None:
            self._discovery.stop()
        tasks = [s.task for s in self._states.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def poll(self) -> SourceResult:
        await self.start()
        assert self._pool is not None
        self._pool.overdue()  # scrapes still waiting for a slot missed this round
        targets = self._sync(self._targets(), self._resting())
        states = [self._states[t.key] for t in targets]
        # A scrape that ended since the last round is taken now and the next one starts
        # at once: a target whose scrape outlasts a round is scraped every round, not
        # every other one.
        ended: dict[str, Outcome] = {}
        for state in states:
            if state.task is not None and state.task.done():
                outcome = self._finished(state)
                if outcome is not None:
                    ended[state.target.key] = outcome
            if state.task is None:
                state.task = asyncio.create_task(self._scrape(state))
        # Wait for this round's scrapes, never for a target already known to be slow: a
        # hung engine holds its own slot, not the others' publish (docs/serving.md "Trust").
        await self._wait_round([s for s in states if s.task is not None and not s.slow])
        now = self._clock()
        gauges: Gauges = {}
        statuses: list[TargetStatus] = []
        errors: Counter[str] = Counter()
        inventory = tuple(self._inventory())
        scraped = {t.key for t in targets}
        for state in states:
            outcomes = [ended[k]] if (k := state.target.key) in ended else []
            outcome = self._finished(state)
            if outcome is not None:
                outcomes.append(outcome)
            for i, outcome in enumerate(outcomes):
                # gauges from the latest reading only; counters from every one
                into = gauges if i == len(outcomes) - 1 else {}
                state.status = await self._take(state, outcome, inventory, into, now)
                if not outcome.ok:
                    errors[outcome.reason] += 1
            if state.status is not None:
                statuses.append(state.status)
        for key, state in self._states.items():  # resting under max_targets: last status
            if key not in scraped and state.status is not None:
                statuses.append(state.status)
        for state in self._states.values():
            state.ledger.expire(now)
        self._accounts.published.expire(now, self._limits.stale_after)
        return SourceResult(
            source=self.name, errors=dict(errors), reading=self._reading(gauges, statuses)
        )

    async def _wait_round(self, states: list[TargetState]) -> None:
        """Wait for these targets' scrapes, at most the wait budget, and never for the
        scrapes of a tenant that has scrapes queued for a slot: that tenant is served at
        its fair share, and waiting for it would hold the others' publish."""
        assert self._pool is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_budget()
        pending = {s.task: _tenant(s.target) for s in states if s.task is not None}
        while pending:
            wanted = {t for t, tenant in pending.items() if not self._pool.backlogged(tenant)}
            remaining = deadline - loop.time()
            if not wanted or remaining <= 0:
                return
            done, _ = await asyncio.wait(
                wanted, timeout=min(remaining, ROUND_RECHECK), return_when=FIRST_COMPLETED
            )
            for task in done:
                del pending[task]

    def _resting(self) -> tuple[Target, ...]:
        """Discovered targets left out of this round for lack of a place under
        max_targets (they get one in turn): kept, not forgotten, and counted."""
        resting = tuple(getattr(self._targets, "resting", ()))
        if resting and self._pool is not None:
            self._pool.limited[RESTING_REASON] += len(resting)
        return resting

    @property
    def scrapes_limited(self) -> tuple[tuple[str, int], ...]:
        """The pool's held-back scrapes by reason, each from 0."""
        found = self._pool.limited if self._pool is not None else {}
        return tuple((reason, found.get(reason, 0)) for reason in LIMITED_REASONS)

    async def _take(
        self,
        state: TargetState,
        outcome: Outcome,
        inventory: Sequence[Device],
        gauges: Gauges,
        now: float,
    ) -> TargetStatus:
        """One finished scrape: its reading attributed and accounted (or the failure noted
        in the ledger), its health logged; returns the target's status."""
        attribution = NONE
        if outcome.reading is not None:
            attribution = await self._attribution(state, outcome.reading, inventory)
            self._accounts.account(
                state, outcome.reading, self._default_model(state), attribution,
                inventory, gauges, now,
            )  # fmt: skip
        else:
            state.ledger.failed()
        status = self._status(state, outcome, attribution)
        self._log_state(state, outcome, attribution)
        return status

    def _reading(self, gauges: Gauges, statuses: list[TargetStatus]) -> ServingState:
        """This round's published state: per-GPU rows, target health, discovery."""
        discovery = None
        if self._discovery is not None:
            found, reason = self._discovery.state
            discovery = (found == "ok", reason)
        dropped = getattr(self._targets, "dropped", None)
        return ServingState(
            gpus=self._accounts.served(gauges),
            targets=tuple(statuses),
            discovery=discovery,
            targets_dropped=tuple(sorted(dropped.items())) if dropped else (),
            scrapes_limited=self.scrapes_limited,
        )

    def _wait_budget(self) -> float:
        """How long a round waits for its scrapes: at most the timeout, and no longer than
        the interval (at least 1 s, for a loaded machine), so the next round is on time."""
        return min(self._config.timeout + TIMEOUT_MARGIN, max(self.interval, WAIT_FLOOR))

    async def _scrape(self, state: TargetState) -> Outcome:
        """One target's scrape (and its /v1/models look-up), in a task of its own, in a
        slot the pool grants by fair queueing (exporter/sources/serving/pool.py)."""
        session, pool, target = self._session, self._pool, state.target
        assert session is not None and pool is not None
        overrun = self._wait_budget() / 2

        async def run() -> Outcome:
            config = self._config
            outcome = await scrape(session, target, config.timeout, config.max_body_bytes)
            if outcome.reading is not None and target.key in self._states:
                await self._lookup_model(session, outcome)
            return outcome

        return await pool.run(
            run,
            key=target.key,
            tenant=_tenant(target),
            long=state.slow_scrape,
            overrun=overrun,
            cut=lambda reason, error: Outcome(target, overrun, None, reason, error),
            down=state.status is None or not state.status.up,
        )

    def _finished(self, state: TargetState) -> Outcome | None:
        """The outcome of ``state``'s scrape when it is done (the task is then cleared);
        None while it runs. A scrape that outlasts a round marks its target slow."""
        task = state.task
        if task is None:
            return None
        if not task.done():
            state.slow = True
            return None
        state.task = None
        if task.cancelled():
            return None
        exc = task.exception()
        if exc is not None:  # scrape() never raises; a bug must cost this target only
            outcome = Outcome(state.target, 0.0, None, "internal_error", f"{type(exc).__name__}")
        else:
            outcome = task.result()
        # The round waits for what it took in all (a wait for a slot included); the next
        # scrape asks for a long place by how long it held its slot.
        half = self._wait_budget() / 2
        held_long = outcome.duration > half or outcome.reason in (CUT_REASON, PREEMPTED_REASON)
        state.slow = held_long or outcome.duration + outcome.waited > half
        state.slow_scrape = held_long
        return outcome

    def _sync(self, targets: Sequence[Target], resting: Sequence[Target] = ()) -> list[Target]:
        """Bring the per-target states in line with ``targets``: one new state per new
        key, the same state for a target re-listed (reload), and a removed target's state
        and series dropped at once. Two spellings of one key are scraped once. A target
        ``resting`` (waiting its turn under max_targets) keeps its state, so its counts
        carry on when its turn comes."""
        current: dict[str, Target] = {}
        for target in targets:
            current.setdefault(target.key, target)
        kept = {t.key for t in resting}
        for key in [k for k in self._states if k not in current and k not in kept]:
            self._forget(key)
        for key, target in current.items():
            state = self._states.get(key)
            if state is None:
                self._states[key] = TargetState(target, Ledger(self._limits))
            elif state.target != target or state.target.access is not target.access:
                state.target = target  # reloaded settings; its counters carry on
        return list(current.values())

    def _forget(self, key: str) -> None:
        """A target gone (discovery, reload): its state and every series only it fed."""
        state = self._states.pop(key, None)
        if state is not None and state.task is not None:
            state.task.cancel()
        if state is not None and self._pool is not None:
            self._pool.forget(key, _tenant(state.target))
        self._accounts.published.release(key)

    # model names ----------------------------------------------------------------------------

    @staticmethod
    def _default_model(state: TargetState) -> str:
        """The model of series that name none: config, else what /v1/models said."""
        if state.target.model:
            return state.target.model
        return state.v1_model[1] if state.v1_model else ""

    async def _lookup_model(self, session: aiohttp.ClientSession, outcome: Outcome) -> None:
        """llama-server's /metrics names no model: ask its /v1/models once per process
        start (or once a minute while it sends no start token)."""
        target, reading = outcome.target, outcome.reading
        assert reading is not None
        state = self._states[target.key]
        if reading.engine != "llama.cpp" or target.model or any(reading.models):
            return
        cached = state.v1_model
        now = time.monotonic()
        if cached is not None and cached[0] == reading.started:
            if reading.started and cached[1]:
                return
            if now - cached[2] < PID_REFRESH_SECONDS:
                return
        model, error = await models_id(
            session,
            target.url,
            self._config.timeout,
            min(self._config.max_body_bytes, MODELS_MAX_BYTES),
            outcome.request,
        )
        state.v1_model = (reading.started, model, now)
        if error and (cached is None or cached[1] or cached[0] != reading.started):
            log.warning(
                "serving_model_unknown", target=target.name, error=urls.scrub(error, target.url)
            )

    # attribution ----------------------------------------------------------------------------

    async def _attribution(
        self, state: TargetState, reading: Reading, inventory: Sequence[Device]
    ) -> Attribution:
        target = state.target
        uuids: set[str] = set().union(*reading.model_gpus.values()) if reading.model_gpus else set()
        pod_gpus: PodGpus = self._pods().pod_gpus() if target.pod else {}
        processes = tuple(self._processes())
        found = resolve(target, uuids, inventory, pod_gpus, processes, None, self._descends)
        pid = None
        if not found.gpus and processes:
            pid = await self._pid(state)
            if pid is not None:
                found = resolve(target, uuids, inventory, pod_gpus, processes, pid, self._descends)
        if found.refused:
            state.ledger.dropped["gpus_refused"] += 1
        state.once(
            "gpus_refused",
            found.refused,
            (),
            event="serving_gpu_claim_refused",
            level="warning",
            target=target.name,
            assigned=sorted(found.allowed or ()),
            effect="a pod may only narrow the GPUs the kubelet assigned it; its own are used",
        )
        self._log_unattributed(state, "" if found.gpus else _why_none(target, pid, processes))
        return found

    @staticmethod
    def _log_unattributed(state: TargetState, reason: str) -> None:
        """One line when a target's work starts going to no GPU (or why changes)."""
        if state.unattributed != reason and reason:
            log.warning(
                "serving_target_unattributed",
                target=state.target.name,
                reason=reason,
                effect="its signals are published without a gpu label (node level)",
            )
        state.unattributed = reason

    def _descends(self, pid: int, ancestor: int) -> bool:
        return procfs.descends_from(pid, ancestor, self._proc)

    async def _pid(self, state: TargetState) -> int | None:
        """The configured pid, else the process listening on a local target's port."""
        target = state.target
        if target.pid is not None:
            return target.pid
        if not target.is_local or target.port is None:
            return None
        cached = state.pid
        now = time.monotonic()
        if cached is not None:
            pid, when = cached
            alive = pid is not None and (self._proc / str(pid)).exists()
            if alive or now - when < PID_REFRESH_SECONDS:
                return pid
        pid = await asyncio.to_thread(procfs.listener_pid, target.port, self._proc)
        state.pid = (pid, now)
        return pid

    # accounting -----------------------------------------------------------------------------

    # health ---------------------------------------------------------------------------------

    def _status(
        self, state: TargetState, outcome: Outcome, attribution: Attribution
    ) -> TargetStatus:
        target = state.target
        if outcome.reading is not None:
            models = ",".join(m for m in state.models if m) or self._default_model(state)
            state.identity = (outcome.reading.engine, models[: self._limits.max_label_length])
            state.attribution = attribution
        engine, model = state.identity or (
            target.engine,
            target.model[: self._limits.max_label_length],
        )
        att = state.attribution
        return TargetStatus(
            target=target.name,
            up=outcome.ok,
            engine=engine,
            model=model,
            reason=outcome.reason,
            scrape_seconds=outcome.duration,
            wait_seconds=outcome.waited,
            gpus=att.gpus,
            via=att.via,
            dropped=tuple((r, float(n)) for r, n in sorted(state.ledger.dropped.items())),
            namespace=target.namespace,
            pod=target.pod,
            pids=att.pids,
        )

    @staticmethod
    def _log_state(state: TargetState, outcome: Outcome, attribution: Attribution) -> None:
        target = state.target
        logged = ("up", "") if outcome.ok else ("down", outcome.reason)
        if state.logged == logged:
            return
        state.logged = logged
        if outcome.reading is not None:
            log.info(
                "serving_target_up",
                target=target.name,
                engine=outcome.reading.engine,
                version=outcome.reading.version,
                models=list(state.models),
                gpus=list(attribution.gpus),
                via=attribution.via,
            )
        else:
            log.warning(
                "serving_target_down",
                target=target.name,
                reason=outcome.reason,
                error=urls.scrub(outcome.error, target.url),
            )


def _tenant(target: Target) -> str:
    """Whose share of the scrape slots a target draws on: a discovered pod its
    namespace's, a configured target its own."""
    return f"namespace:{target.namespace}" if target.pod else f"target:{target.key}"


def _why_none(target: Target, pid: int | None, processes: Sequence[ProcessInfo]) -> str:
    """Why no rule found a GPU for ``target``, for the log line."""
    parts = []
    if target.gpus:
        parts.append(f"gpus {','.join(target.gpus)} are not in the NVML inventory")
    if target.pod:
        parts.append(f"the kubelet lists no GPU for pod {target.namespace}/{target.pod}")
    if not processes:
        parts.append("NVML lists no compute process")
    elif pid is not None:
        parts.append(f"no NVML compute process is pid {pid} or a descendant of it")
    elif target.is_local:
        parts.append(
            f"no process found listening on port {target.port} (needs the host's PID "
            "namespace and permission to read /proc/<pid>/fd)"
        )
    else:
        parts.append("the engine is not on loopback and no pid is configured")
    return "; ".join(parts)
