"""The serving source: scrapes every target concurrently and publishes per-GPU signals.

Each cycle reads the current targets and starts a scrape task for every target that has
none in flight (bounded concurrency). It waits for them at most ``timeout`` (and at most
the interval), and never for a target whose last scrape outlasted a round: a hung or slow
target's task runs on and is collected by a later cycle, so it never delays another
target's publish. It then attributes every reading to GPUs from the views
it was given (inventory, pod devices, NVML processes) and turns engine counters into
reset-proof per-GPU totals. Target health is published per target at node scope.

Everything kept about a target lives in one :class:`TargetState` (keyed by its normalised
URL), so adding, reloading and forgetting a target is one operation; its
:class:`~exporter.sources.serving.accumulate.Ledger` bounds what the engine can add (model
cap, label length, physical ceiling) before anything becomes a series or a count.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import structlog

from exporter import urls
from exporter.config import ServingConfig
from exporter.readings import (
    Device,
    PodAssignments,
    ProcessInfo,
    ServedModel,
    ServingState,
    TargetStatus,
)
from exporter.snapshot import SourceResult
from exporter.sources.base import Source
from exporter.sources.serving import procfs
from exporter.sources.serving.accumulate import Ledger, Limits, ModelKey, Published, Step
from exporter.sources.serving.adapter import Reading, Settler, SignalKey
from exporter.sources.serving.attribution import (
    NONE,
    Attribution,
    PodGpus,
    resolve,
    to_gpu_labels,
)
from exporter.sources.serving.discovery import PodWatcher
from exporter.sources.serving.fetch import MODELS_MAX_BYTES, models_id
from exporter.sources.serving.scrape import Outcome, scrape
from exporter.sources.serving.signals import FIELDS, SIGNALS, TOKENS, Signal
from exporter.sources.serving.targets import Target, TargetProvider, TargetSet, static_targets
from exporter.util import OnChange

log = structlog.get_logger("serving")

PID_REFRESH_SECONDS = 60.0
WAIT_FLOOR = 1.0
TIMEOUT_MARGIN = 0.1
"""A scrape's own timeout fires this much before a round stops waiting for it."""
"""A round waits at least this long (capped by the timeout) for targets not known slow."""
DERIVED_JITTER = 1e-3
"""A derived counter (a product or difference of printed counters) may dip this share of
its value from rounding (llama.cpp prints 6 significant digits) without being a restart."""

NODE_LEVEL = ("",)
"""The gpu key of signals no rule attributes: rendered without a gpu label."""

Gauges = dict[ModelKey, dict[str, list[float]]]
"""Per published row, each gauge signal's values this round (one per target feeding it)."""
GpusOf = dict[SignalKey, tuple[str, ...]]
"""The GPU labels (or :data:`NODE_LEVEL`) each series of a reading is attributed to."""


@dataclass
class TargetState:
    """Everything the source keeps about one target, so adding, reloading and forgetting
    a target is one operation on one object (keyed by the target's normalised URL)."""

    target: Target
    ledger: Ledger
    identity: tuple[str, str] | None = None
    """(engine, models) of the last reading."""
    logged: tuple[str, str] | None = None
    """("up", "") or ("down", reason) as last logged."""
    attribution: Attribution = NONE
    pid: tuple[int | None, float] | None = None
    """(pid listening on the target's port, when looked up)."""
    unattributed: str = ""
    models: tuple[str, ...] = ()
    """Admitted model labels of the last reading."""
    flapped: bool = False
    """Its start time once changed with no sign of a restart (logged once)."""
    v1_model: tuple[str, str, float] | None = None
    """(process start token, model id from /v1/models, when asked)."""
    once: OnChange = field(default_factory=lambda: OnChange(log))
    """Its log-once states (model cap hit, implausible values, start-time flapping)."""
    settler: Settler = field(default_factory=Settler)
    """Live estimates settling on the engine's exact count (llama.cpp generation)."""
    task: asyncio.Task[Outcome] | None = None
    """Its scrape in flight (one at a time; it may outlast a round)."""
    slow: bool = False
    """Its last scrape outlasted a round: later rounds do not wait for it."""
    status: TargetStatus | None = None
    """Its last published health, repeated while a scrape is in flight."""


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
        self._gate: asyncio.Semaphore | None = None
        self._states: dict[str, TargetState] = {}
        """Target key (normalised URL) -> all that is kept about it."""
        self._published = Published()

    def reconfigure(self, config: ServingConfig) -> None:
        """A reloaded serving section: its static targets, bounds and timings apply from
        the next poll; targets no longer listed are forgotten there, with their series."""
        if isinstance(self._targets, TargetSet):
            self._targets.replace_static(static_targets(config), config.max_targets)
        self._config = config
        self.interval = config.interval
        self._limits = Limits.of(config)
        for state in self._states.values():
            state.ledger.limits = self._limits

    async def start(self) -> None:
        if self._discovery is not None and not self._discovery.started:
            self._discovery.start()
        if self._gate is None:
            self._gate = asyncio.Semaphore(self._config.max_concurrency)
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
        targets = self._sync(self._targets())
        states = [self._states[t.key] for t in targets]
        for state in states:
            if state.task is None:
                state.task = asyncio.create_task(self._scrape(state.target))
        # Wait for this round's scrapes, never for a target already known to be slow: a
        # hung engine holds its own slot, not the others' publish (docs/serving.md "Trust").
        waited = {s.task for s in states if s.task is not None and not s.slow}
        if waited:
            await asyncio.wait(waited, timeout=self._wait_budget())
        now = self._clock()
        inventory = tuple(self._inventory())
        gauges: Gauges = {}
        statuses: list[TargetStatus] = []
        errors: Counter[str] = Counter()
        for state in states:
            outcome = self._finished(state)
            if outcome is None:
                if state.status is not None:
                    statuses.append(state.status)
                continue
            attribution = NONE
            if outcome.reading is not None:
                attribution = await self._attribution(state, outcome.reading, inventory)
                self._account(state, outcome.reading, attribution, inventory, gauges, now)
            else:
                state.ledger.failed()
                errors[outcome.reason] += 1
            state.status = self._status(state, outcome, attribution)
            statuses.append(state.status)
            self._log_state(state, outcome, attribution)
        for state in self._states.values():
            state.ledger.expire(now)
        self._published.expire(now, self._limits.stale_after)
        discovery = None
        if self._discovery is not None:
            found, reason = self._discovery.state
            discovery = (found == "ok", reason)
        dropped = getattr(self._targets, "dropped", None)
        return SourceResult(
            source=self.name,
            errors=dict(errors),
            reading=ServingState(
                gpus=self._served(gauges),
                targets=tuple(statuses),
                discovery=discovery,
                targets_dropped=tuple(sorted(dropped.items())) if dropped else (),
            ),
        )

    def _wait_budget(self) -> float:
        """How long a round waits for its scrapes: at most the timeout, and no longer than
        the interval (at least 1 s, for a loaded machine), so the next round is on time."""
        return min(self._config.timeout + TIMEOUT_MARGIN, max(self.interval, WAIT_FLOOR))

    async def _scrape(self, target: Target) -> Outcome:
        """One target's scrape (and its /v1/models look-up), in a task of its own."""
        session, gate = self._session, self._gate
        assert session is not None and gate is not None
        async with gate:
            config = self._config
            outcome = await scrape(session, target, config.timeout, config.max_body_bytes)
            if outcome.reading is not None and target.key in self._states:
                await self._lookup_model(session, outcome)
            return outcome

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
        state.slow = outcome.duration > self._wait_budget() / 2
        return outcome

    def _sync(self, targets: Sequence[Target]) -> list[Target]:
        """Bring the per-target states in line with ``targets``: one new state per new
        key, the same state for a target re-listed (reload), and a removed target's state
        and series dropped at once. Two spellings of one key are scraped once."""
        current: dict[str, Target] = {}
        for target in targets:
            current.setdefault(target.key, target)
        for key in [k for k in self._states if k not in current]:
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
        self._published.release(key)

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

    def _account(
        self,
        state: TargetState,
        reading: Reading,
        attribution: Attribution,
        inventory: Sequence[Device],
        gauges: Gauges,
        now: float,
    ) -> None:
        """Feed one reading's accepted counter deltas into the published totals and its
        gauges into ``gauges``; everything passes the target's ledger first."""
        reading = state.settler.apply(reading)
        state.ledger.count(reading.dropped)
        values = state.ledger.relabel(reading.values, self._default_model(state), now)
        gpus_of = self._place(state, reading, values, attribution, inventory)
        step = self._step(state, reading, values, gpus_of, now)
        for key, value in values.items():
            spec = SIGNALS[key[0]]
            rows = [(gpu, key[1], reading.engine) for gpu in gpus_of[key]]
            if spec.kind == "counter":
                delta = _net(key, step.deltas, reading.minus)
                share = delta / len(rows) if spec.split == "split" else delta
                for row in rows:
                    self._published.add(row, spec.name, share, state.target.key, now)
            else:
                for row in rows:
                    self._published.touch(row, state.target.key, now)
                    gauges.setdefault(row, {}).setdefault(spec.name, []).append(value)
        self._log_caps(state)

    def _place(
        self,
        state: TargetState,
        reading: Reading,
        values: Mapping[SignalKey, float],
        attribution: Attribution,
        inventory: Sequence[Device],
    ) -> GpusOf:
        """The GPUs each relabelled series goes to; records the target's admitted models."""
        model_gpus = {
            name: uuids
            for model, uuids in reading.model_gpus.items()
            if (name := model[: self._limits.max_label_length]) in state.ledger.models
        }
        state.models = tuple(sorted({key[1] for key in values} | set(model_gpus)))
        return {
            key: _gpus_for(key, model_gpus, attribution, inventory) or NODE_LEVEL
            for key in values
        }

    @staticmethod
    def _step(
        state: TargetState,
        reading: Reading,
        values: Mapping[SignalKey, float],
        gpus_of: GpusOf,
        now: float,
    ) -> Step:
        """The ledger's accepted deltas of every counter, attributed or not (so attribution
        arriving later does not dump the engine's whole history onto a GPU in one step)."""
        step = state.ledger.step(
            values,
            counters=(s for s in {k[0] for k in values} if SIGNALS[s].kind == "counter"),
            now=now,
            gpus=lambda key: len(gpus_of[key]),
            rises=reading.rises,
            jitter=dict.fromkeys(reading.derived, DERIVED_JITTER),
            started=reading.started,
        )
        target = state.target
        if step.restarted and reading.started:
            log.info("serving_target_restarted", target=target.name, engine=reading.engine)
        state.flapped = state.flapped or step.flapped
        state.once(  # once per target: a flapping engine would otherwise log every scrape
            "flapping",
            state.flapped,
            False,
            event="serving_start_time_changed_without_restart",
            level="warning",
            target=target.name,
            effect="counters did not go down: nothing was counted again",
        )
        return step

    def _log_caps(self, state: TargetState) -> None:
        """One line when a target first hits the model cap or an implausible value."""
        dropped = state.ledger.dropped
        state.once(
            "models",
            dropped["max_models"] > 0,
            False,
            event="serving_target_over_model_cap",
            level="warning",
            target=state.target.name,
            max_models_per_target=self._limits.max_models,
            effect="values of further model names are dropped (max_models)",
        )
        state.once(
            "implausible",
            dropped["implausible"] > 0,
            False,
            event="serving_counter_implausible",
            level="warning",
            target=state.target.name,
            max_tokens_per_second_per_gpu=self._limits.tokens_per_second,
            effect="growth above the ceiling is dropped (implausible)",
        )

    def _served(self, gauges: Gauges) -> dict[str, tuple[ServedModel, ...]]:
        """One ServedModel per (gpu, model, engine) with totals or live gauges."""
        out: dict[str, list[ServedModel]] = {}
        rows = self._published.rows()
        for key in sorted(set(rows) | set(gauges)):
            gpu, model, engine = key
            out.setdefault(gpu, []).append(
                _served_model(model, engine, rows.get(key, {}), gauges.get(key, {}))
            )
        return {gpu: tuple(models) for gpu, models in out.items()}

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
            gpus=att.gpus,
            via=att.via,
            dropped=tuple((r, float(n)) for r, n in sorted(state.ledger.dropped.items())),
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


def _gpus_for(
    key: SignalKey,
    model_gpus: Mapping[str, frozenset[str]],
    attribution: Attribution,
    inventory: Sequence[Device],
) -> tuple[str, ...]:
    """The series' own GPU label (Triton) or its model's, unless config pinned GPUs; for a
    discovered pod only among the GPUs the kubelet assigned it."""
    if attribution.via != "explicit":
        _, model, uuid, _ = key
        found: tuple[str, ...] | None = None
        if uuid:
            found = to_gpu_labels([uuid], inventory)
        elif model in model_gpus:
            found = to_gpu_labels(sorted(model_gpus[model]), inventory)
        if found is not None and (attribution.allowed is None or set(found) <= attribution.allowed):
            return found
    return attribution.gpus


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


def _net(
    key: SignalKey, deltas: Mapping[SignalKey, float], minus: Mapping[str, str]
) -> float:
    """A counter series' accepted growth, less the growth of the signal its rule names in
    ``minus`` (same model, GPU and reason), never below 0."""
    delta = deltas.get(key, 0.0)
    other = minus.get(key[0])
    if other is not None:
        delta = max(delta - deltas.get((other, *key[1:]), 0.0), 0.0)
    return delta


def _served_model(
    model: str, engine: str, totals: Mapping[str, float], gauges: Mapping[str, list[float]]
) -> ServedModel:
    """One row's counter totals and gauges as the typed reading, field by field as
    exporter/sources/serving/signals.py declares them."""
    tokens = tuple(sorted((s.token_kind, totals[s.name]) for s in TOKENS if s.name in totals))
    fields: dict[str, Any] = {s.served_as: _value(s, totals, gauges) for s in FIELDS}
    return replace(ServedModel(model=model, engine=engine, tokens=tokens), **fields)


def _value(
    spec: Signal, totals: Mapping[str, float], gauges: Mapping[str, list[float]]
) -> float | None:
    """A counter's total, or the gauge of every engine on the GPU merged (several engines
    on one GPU: requests add up, KV takes the fullest)."""
    if spec.kind == "counter":
        return totals.get(spec.name)
    values = gauges.get(spec.name)
    if not values:
        return None
    return max(values) if spec.merge == "max" else sum(values)
