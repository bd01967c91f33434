"""The serving source: scrapes every target concurrently and publishes per-GPU signals.

Each cycle reads the current targets, scrapes them with bounded concurrency (one slow or
broken target costs only its own timeout), attributes every reading to GPUs from the views
it was given (inventory, pod devices, NVML processes) and turns engine counters into
reset-proof per-GPU totals. Target health is published per target at node scope.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import aiohttp
import structlog

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
from exporter.sources.serving.accumulate import DeltaTracker
from exporter.sources.serving.adapter import Reading, SignalKey
from exporter.sources.serving.attribution import (
    NONE,
    Attribution,
    PodGpus,
    resolve,
    to_gpu_labels,
)
from exporter.sources.serving.discovery import PodWatcher
from exporter.sources.serving.engines import SIGNALS
from exporter.sources.serving.fetch import MODELS_MAX_BYTES, models_id
from exporter.sources.serving.scrape import Outcome, scrape
from exporter.sources.serving.targets import Target, TargetProvider

log = structlog.get_logger("serving")

PID_REFRESH_SECONDS = 60.0
DERIVED_JITTER = 1e-3
"""A derived counter (a product or difference of printed counters) may dip this share of
its value from rounding (llama.cpp prints 6 significant digits) without being a restart."""

COUNTERS: dict[str, str] = {
    "prompt_tokens": "tokens/prompt",
    "prompt_cached_tokens": "tokens/prompt_cached",
    "generation_tokens": "tokens/generation",
    "flops_per_gpu": "flops",
    "preemptions": "preemptions",
    "busy_seconds": "busy_seconds",
}
"""Normalised counter signal -> the ServedModel field its per-GPU total feeds."""

GAUGES = ("requests_running", "requests_waiting", "kv_cache_usage")

DROP_REASONS = {"non_finite": 0, "negative": 0}
"""Why an engine value is refused at the edge; every target shows both (from 0)."""

T = TypeVar("T")

NODE_LEVEL = ("",)
"""The gpu key of signals no rule attributes: rendered without a gpu label."""

ModelKey = tuple[str, str, str]
"""(gpu, model, engine)."""


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
    ) -> None:
        self.interval = config.interval
        self._config = config
        self._targets = targets
        self._inventory = inventory
        self._processes = processes
        self._pods = pods
        self._proc = proc_root
        self._discovery = discovery
        self._session: aiohttp.ClientSession | None = None
        self._tracker = DeltaTracker()
        self._totals: dict[ModelKey, dict[str, float]] = {}
        self._identity: dict[str, tuple[str, str]] = {}
        self._state: dict[str, tuple[str, str]] = {}
        self._attributed: dict[str, Attribution] = {}
        self._pids: dict[str, tuple[int | None, float]] = {}
        self._started: dict[str, str] = {}
        self._unattributed: dict[str, str] = {}
        self._dropped: dict[str, Counter[str]] = {}
        """url -> engine values refused at the edge, by reason, since the target appeared."""
        self._v1_models: dict[str, tuple[str, str, float]] = {}
        """url -> (process start token, model id from /v1/models, when asked)."""

    async def start(self) -> None:
        if self._discovery is not None and not self._discovery.started:
            self._discovery.start()
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._config.max_concurrency),
                timeout=aiohttp.ClientTimeout(total=None),
            )

    async def close(self) -> None:
        if self._discovery is not None:
            self._discovery.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def poll(self) -> SourceResult:
        await self.start()
        session = self._session
        assert session is not None
        targets = self._targets()
        gate = asyncio.Semaphore(self._config.max_concurrency)

        async def one(target: Target) -> Outcome:
            async with gate:
                outcome = await scrape(
                    session, target, self._config.timeout, self._config.max_body_bytes
                )
                if outcome.reading is not None:
                    await self._lookup_model(session, outcome)
                return outcome

        outcomes = await asyncio.gather(*(one(t) for t in targets))
        self._forget_removed({t.url for t in targets})
        inventory = tuple(self._inventory())
        gauges: dict[ModelKey, dict[str, list[float]]] = {}
        statuses: list[TargetStatus] = []
        errors: Counter[str] = Counter()
        for outcome in outcomes:
            attribution = NONE
            if outcome.reading is not None:
                attribution = await self._attribution(outcome.target, outcome.reading, inventory)
                self._account(outcome.target, outcome.reading, attribution, inventory, gauges)
            else:
                errors[outcome.reason] += 1
            statuses.append(self._status(outcome, attribution))
            self._log_state(outcome, attribution)
        discovery = None
        if self._discovery is not None:
            state, reason = self._discovery.state
            discovery = (state == "ok", reason)
        return SourceResult(
            source=self.name,
            errors=dict(errors),
            reading=ServingState(
                gpus=self._served(gauges), targets=tuple(statuses), discovery=discovery
            ),
        )

    # model names ----------------------------------------------------------------------------

    def _default_model(self, target: Target) -> str:
        """The model of series that name none: config, else what /v1/models said."""
        if target.model:
            return target.model
        cached = self._v1_models.get(target.url)
        return cached[1] if cached else ""

    async def _lookup_model(self, session: aiohttp.ClientSession, outcome: Outcome) -> None:
        """llama-server's /metrics names no model: ask its /v1/models once per process
        start (or once a minute while it sends no start token)."""
        target, reading = outcome.target, outcome.reading
        assert reading is not None
        if reading.engine != "llama.cpp" or target.model or any(reading.models):
            return
        cached = self._v1_models.get(target.url)
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
        self._v1_models[target.url] = (reading.started, model, now)
        if error and (cached is None or cached[1] or cached[0] != reading.started):
            log.warning("serving_model_unknown", target=target.name, error=error)

    # attribution ----------------------------------------------------------------------------

    async def _attribution(
        self, target: Target, reading: Reading, inventory: Sequence[Device]
    ) -> Attribution:
        uuids: set[str] = set().union(*reading.model_gpus.values()) if reading.model_gpus else set()
        pod_gpus: PodGpus = self._pods().pod_gpus() if target.pod else {}
        processes = tuple(self._processes())
        found = resolve(target, uuids, inventory, pod_gpus, processes, None, self._descends)
        pid = None
        if found is NONE and processes:
            pid = await self._pid(target)
            if pid is not None:
                found = resolve(target, uuids, inventory, pod_gpus, processes, pid, self._descends)
        self._log_unattributed(target, "" if found.gpus else _why_none(target, pid, processes))
        return found

    def _log_unattributed(self, target: Target, reason: str) -> None:
        """One line when a target's work starts going to no GPU (or why changes)."""
        if self._unattributed.get(target.url, "") != reason and reason:
            log.warning(
                "serving_target_unattributed",
                target=target.name,
                reason=reason,
                effect="its signals are published without a gpu label (node level)",
            )
        self._unattributed[target.url] = reason

    def _descends(self, pid: int, ancestor: int) -> bool:
        return procfs.descends_from(pid, ancestor, self._proc)

    async def _pid(self, target: Target) -> int | None:
        """The configured pid, else the process listening on a local target's port."""
        if target.pid is not None:
            return target.pid
        if not target.is_local or target.port is None:
            return None
        cached = self._pids.get(target.url)
        now = time.monotonic()
        if cached is not None:
            pid, when = cached
            alive = pid is not None and (self._proc / str(pid)).exists()
            if alive or now - when < PID_REFRESH_SECONDS:
                return pid
        pid = await asyncio.to_thread(procfs.listener_pid, target.port, self._proc)
        self._pids[target.url] = (pid, now)
        return pid

    # accounting -----------------------------------------------------------------------------

    def _account(
        self,
        target: Target,
        reading: Reading,
        attribution: Attribution,
        inventory: Sequence[Device],
        gauges: dict[ModelKey, dict[str, list[float]]],
    ) -> None:
        """Feed one reading's counters into the totals and its gauges into ``gauges``."""
        self._restarted(target, reading)
        deltas: dict[SignalKey, float] = {}
        for key, value in reading.values.items():
            signal = key[0]
            if SIGNALS[signal].kind != "counter":
                continue
            # Track every counter, attributed or not, so attribution arriving later does
            # not dump the engine's whole history onto a GPU in one step.
            if signal in reading.rises:
                deltas[key] = self._tracker.rise((target.url, key), value)
            else:
                jitter = DERIVED_JITTER if signal in reading.derived else 0.0
                deltas[key] = self._tracker.delta((target.url, key), value, jitter)
        for key, value in reading.values.items():
            signal, model, _uuid, _reason = key
            spec = SIGNALS[signal]
            counter = COUNTERS.get(signal)
            delta = deltas.get(key, 0.0)
            other = reading.minus.get(signal)
            if other is not None:
                delta = max(delta - deltas.get((other, *key[1:]), 0.0), 0.0)
            # Work no rule ties to a GPU is still work: it goes to gpu "" (node level).
            gpus = _gpus_for(key, reading, attribution, inventory) or NODE_LEVEL
            model = model or self._default_model(target)
            if counter is not None:
                share = delta / len(gpus) if spec.split == "split" else delta
                for gpu in gpus:
                    fields = self._totals.setdefault((gpu, model, reading.engine), {})
                    fields[counter] = fields.get(counter, 0.0) + max(share, 0.0)
            elif signal in GAUGES:
                for gpu in gpus:
                    row = gauges.setdefault((gpu, model, reading.engine), {})
                    row.setdefault(signal, []).append(value)

    def _restarted(self, target: Target, reading: Reading) -> None:
        """A new process start token: the engine restarted, so every counter starts from
        zero again, even one that has already passed its old value (a drop alone would
        miss that and lose the old process's last counts)."""
        before = self._started.get(target.url, "")
        if reading.started:
            self._started[target.url] = reading.started
        if before and reading.started and before != reading.started:
            url = target.url
            self._tracker.forget_where(lambda key: key[0] == url)
            log.info("serving_target_restarted", target=target.name, engine=reading.engine)

    def _served(
        self, gauges: dict[ModelKey, dict[str, list[float]]]
    ) -> dict[str, tuple[ServedModel, ...]]:
        """One ServedModel per (gpu, model, engine) with totals or live gauges."""
        out: dict[str, list[ServedModel]] = {}
        for key in sorted(set(self._totals) | set(gauges)):
            gpu, model, engine = key
            totals = self._totals.get(key, {})
            row = gauges.get(key, {})
            tokens = tuple(
                (name.removeprefix("tokens/"), value)
                for name, value in sorted(totals.items())
                if name.startswith("tokens/")
            )
            out.setdefault(gpu, []).append(
                ServedModel(
                    model=model,
                    engine=engine,
                    tokens=tokens,
                    # Several engines on one GPU: requests add up, KV takes the fullest.
                    requests_running=_sum(row.get("requests_running")),
                    requests_waiting=_sum(row.get("requests_waiting")),
                    kv_cache_usage=_max(row.get("kv_cache_usage")),
                    flops=totals.get("flops"),
                    preemptions=totals.get("preemptions"),
                    busy_seconds=totals.get("busy_seconds"),
                )
            )
        return {gpu: tuple(models) for gpu, models in out.items()}

    # health ---------------------------------------------------------------------------------

    def _status(self, outcome: Outcome, attribution: Attribution) -> TargetStatus:
        target = outcome.target
        if outcome.reading is not None:
            models = ",".join(m for m in outcome.reading.models if m) or self._default_model(
                target
            )
            self._identity[target.url] = (outcome.reading.engine, models)
            self._attributed[target.url] = attribution
        dropped = self._dropped.setdefault(target.url, Counter(DROP_REASONS))
        if outcome.reading is not None:
            dropped.update(outcome.reading.dropped)
        engine, model = self._identity.get(target.url, (target.engine, target.model))
        att = self._attributed.get(target.url, NONE)
        return TargetStatus(
            target=target.name,
            up=outcome.ok,
            engine=engine,
            model=model,
            reason=outcome.reason,
            scrape_seconds=outcome.duration,
            gpus=att.gpus,
            via=att.via,
            dropped=tuple((reason, float(n)) for reason, n in sorted(dropped.items())),
        )

    def _log_state(self, outcome: Outcome, attribution: Attribution) -> None:
        target = outcome.target
        state = ("up", "") if outcome.ok else ("down", outcome.reason)
        if self._state.get(target.url) == state:
            return
        self._state[target.url] = state
        if outcome.reading is not None:
            log.info(
                "serving_target_up",
                target=target.name,
                engine=outcome.reading.engine,
                version=outcome.reading.version,
                models=list(outcome.reading.models),
                gpus=list(attribution.gpus),
                via=attribution.via,
            )
        else:
            log.warning(
                "serving_target_down",
                target=target.name,
                reason=outcome.reason,
                error=outcome.error,
            )

    def _forget_removed(self, current: set[str]) -> None:
        """A target gone from discovery: drop its per-target state (totals stay)."""
        _keep_only(self._identity, current)
        _keep_only(self._state, current)
        _keep_only(self._attributed, current)
        _keep_only(self._pids, current)
        _keep_only(self._started, current)
        _keep_only(self._unattributed, current)
        _keep_only(self._v1_models, current)
        _keep_only(self._dropped, current)
        self._tracker.forget_where(lambda key: key[0] not in current)


def _gpus_for(
    key: SignalKey, reading: Reading, attribution: Attribution, inventory: Sequence[Device]
) -> tuple[str, ...]:
    """The series' own GPU label (Triton) or its model's, unless config pinned GPUs."""
    if attribution.via != "explicit":
        _, model, uuid, _ = key
        if uuid:
            return to_gpu_labels([uuid], inventory)
        if model in reading.model_gpus:
            return to_gpu_labels(sorted(reading.model_gpus[model]), inventory)
    return attribution.gpus


def _keep_only(table: dict[str, T], current: set[str]) -> None:
    for url in [u for u in table if u not in current]:
        del table[url]


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


def _sum(values: list[float] | None) -> float | None:
    return None if not values else sum(values)


def _max(values: list[float] | None) -> float | None:
    return None if not values else max(values)
