"""The serving source: scrapes every target concurrently and publishes per-GPU signals.

Each cycle reads the current targets, scrapes them with bounded concurrency (one slow or
broken target costs only its own timeout), attributes every reading to GPUs from the
latest snapshot (inventory, pod devices, NVML processes) and turns engine counters into
reset-proof per-GPU totals. Target health is published per target at node scope.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Hashable
from pathlib import Path

import aiohttp
import structlog

from exporter.config import ServingConfig
from exporter.snapshot import Labels, Sample, Snapshot, SnapshotStore, SourceResult, labels
from exporter.sources.base import Source
from exporter.sources.serving import procfs
from exporter.sources.serving.accumulate import DeltaTracker, Totals
from exporter.sources.serving.adapter import Reading, SignalKey
from exporter.sources.serving.attribution import NONE, Attribution, resolve, to_gpu_labels
from exporter.sources.serving.discovery import PodWatcher
from exporter.sources.serving.engines import SIGNALS
from exporter.sources.serving.metrics import (
    COUNTER_FAMILIES,
    DISCOVERY_UP,
    GAUGE_FAMILIES,
    SCRAPE_DURATION,
    TARGET_ERROR,
    TARGET_GPUS,
    TARGET_UP,
)
from exporter.sources.serving.scrape import Outcome, scrape
from exporter.sources.serving.targets import Target, TargetProvider

log = structlog.get_logger("serving")

PID_REFRESH_SECONDS = 60.0
READINGS_KEY = "serving_readings"
ATTRIBUTION_KEY = "serving_attribution"


class ServingSource(Source):
    name = "serving"

    def __init__(
        self,
        config: ServingConfig,
        store: SnapshotStore,
        targets: TargetProvider,
        proc_root: Path = Path("/proc"),
        discovery: PodWatcher | None = None,
    ) -> None:
        self.interval = config.interval
        self._config = config
        self._store = store
        self._targets = targets
        self._proc = proc_root
        self._discovery = discovery
        self._session: aiohttp.ClientSession | None = None
        self._tracker = DeltaTracker()
        self._totals = Totals()
        self._identity: dict[str, tuple[str, str]] = {}
        self._state: dict[str, tuple[str, str]] = {}
        self._attributed: dict[str, Attribution] = {}
        self._pids: dict[str, tuple[int | None, float]] = {}

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
        assert self._session is not None
        targets = self._targets()
        gate = asyncio.Semaphore(self._config.max_concurrency)

        async def one(target: Target) -> Outcome:
            async with gate:
                return await scrape(
                    self._session,  # type: ignore[arg-type]
                    target,
                    self._config.timeout,
                    self._config.max_body_bytes,
                )

        outcomes = await asyncio.gather(*(one(t) for t in targets))
        self._forget_removed({t.url for t in targets})
        snapshot = self._store.current
        gauges: dict[tuple[str, str, Labels], list[float]] = {}
        node: list[Sample] = []
        errors: Counter[str] = Counter()
        for outcome in outcomes:
            attribution = NONE
            if outcome.reading is not None:
                attribution = await self._attribution(outcome.target, outcome.reading, snapshot)
                self._account(outcome.target, outcome.reading, attribution, snapshot, gauges)
            else:
                errors[outcome.reason] += 1
            node.extend(self._target_samples(outcome, attribution))
            self._log_state(outcome, attribution)
        if self._discovery is not None:
            state, reason = self._discovery.state
            node.append(Sample(DISCOVERY_UP, 1.0 if state == "ok" else 0.0, labels(reason=reason)))
        return SourceResult(
            source=self.name,
            devices=self._device_samples(gauges),
            node=tuple(node),
            errors=dict(errors),
            extra={
                READINGS_KEY: {o.target.url: o.reading for o in outcomes if o.reading},
                ATTRIBUTION_KEY: {
                    o.target.url: self._attributed.get(o.target.url, NONE) for o in outcomes
                },
            },
        )

    async def _attribution(self, target: Target, reading: Reading, snap: Snapshot) -> Attribution:
        uuids = set().union(*reading.model_gpus.values()) if reading.model_gpus else set()
        found = resolve(target, uuids, snap, None, self._descends)
        if found is NONE and snap.processes:
            pid = await self._pid(target)
            if pid is not None:
                found = resolve(target, uuids, snap, pid, self._descends)
        return found

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

    def _account(
        self,
        target: Target,
        reading: Reading,
        attribution: Attribution,
        snap: Snapshot,
        gauges: dict[tuple[str, str, Labels], list[float]],
    ) -> None:
        """Feed one reading's counters into the totals and its gauges into ``gauges``."""
        for key, value in reading.values.items():
            signal, model, _uuid, _reason = key
            spec = SIGNALS[signal]
            gpus = self._gpus_for(key, reading, attribution, snap)
            delta = self._tracker.delta((target.url, key), value) if spec.kind == "counter" else 0
            if not gpus:
                continue
            model = model or target.model
            if spec.kind == "counter" and signal in COUNTER_FAMILIES:
                family, fixed = COUNTER_FAMILIES[signal]
                share = delta / len(gpus) if spec.split == "split" else delta
                series = labels(**dict(fixed), model=model, engine=reading.engine)
                for gpu in gpus:
                    self._totals.add((gpu, family, series), share)
            elif spec.kind == "gauge" and signal in GAUGE_FAMILIES:
                family, fixed = GAUGE_FAMILIES[signal]
                series = labels(**dict(fixed), model=model, engine=reading.engine)
                for gpu in gpus:
                    gauges.setdefault((gpu, family, series), []).append(value)

    @staticmethod
    def _gpus_for(
        key: SignalKey, reading: Reading, attribution: Attribution, snap: Snapshot
    ) -> tuple[str, ...]:
        """The series' own GPU label (Triton) or its model's, unless config pinned GPUs."""
        if attribution.via != "explicit":
            _, model, uuid, _ = key
            if uuid:
                return to_gpu_labels([uuid], snap)
            if model in reading.model_gpus:
                return to_gpu_labels(sorted(reading.model_gpus[model]), snap)
        return attribution.gpus

    def _device_samples(
        self, gauges: dict[tuple[str, str, Labels], list[float]]
    ) -> dict[str, tuple[Sample, ...]]:
        out: dict[str, list[Sample]] = {}
        for key, total in self._totals.items():
            gpu, family, series = _totals_key(key)
            out.setdefault(gpu, []).append(Sample(family, total, series))
        for (gpu, family, series), values in gauges.items():
            # Several engines on one GPU: requests add up, a KV ratio takes the fullest.
            value = max(values) if family in _MAX_GAUGES else sum(values)
            out.setdefault(gpu, []).append(Sample(family, value, series))
        return {gpu: tuple(samples) for gpu, samples in out.items()}

    def _target_samples(self, outcome: Outcome, attribution: Attribution) -> list[Sample]:
        target = outcome.target
        if outcome.reading is not None:
            models = ",".join(m for m in outcome.reading.models if m) or target.model
            self._identity[target.url] = (outcome.reading.engine, models)
            self._attributed[target.url] = attribution
        engine, model = self._identity.get(target.url, (target.engine, target.model))
        att = self._attributed.get(target.url, NONE)
        samples = [
            Sample(
                TARGET_UP,
                1.0 if outcome.ok else 0.0,
                labels(target=target.url, engine=engine, model=model),
            ),
            Sample(SCRAPE_DURATION, outcome.duration, labels(target=target.url)),
            Sample(TARGET_GPUS, float(len(att.gpus)), labels(target=target.url, via=att.via)),
        ]
        if not outcome.ok:
            samples.append(
                Sample(TARGET_ERROR, 1.0, labels(target=target.url, reason=outcome.reason))
            )
        return samples

    def _log_state(self, outcome: Outcome, attribution: Attribution) -> None:
        url = outcome.target.url
        state = ("up", "") if outcome.ok else ("down", outcome.reason)
        if self._state.get(url) != state:
            if outcome.ok:
                reading = outcome.reading
                assert reading is not None
                log.info(
                    "serving_target_up",
                    target=url,
                    engine=reading.engine,
                    version=reading.version,
                    models=list(reading.models),
                    gpus=list(attribution.gpus),
                    via=attribution.via,
                )
            else:
                log.warning(
                    "serving_target_down", target=url, reason=outcome.reason, error=outcome.error
                )
            self._state[url] = state

    def _forget_removed(self, current: set[str]) -> None:
        """A target gone from discovery: drop its per-target state (totals stay)."""
        for table in (self._identity, self._state, self._attributed, self._pids):
            for url in [u for u in table if u not in current]:
                del table[url]
        self._tracker.forget_where(lambda key: key[0] not in current)


_MAX_GAUGES = frozenset({GAUGE_FAMILIES["kv_cache_usage"][0]})


def _totals_key(key: Hashable) -> tuple[str, str, Labels]:
    assert isinstance(key, tuple) and len(key) == 3
    return key[0], key[1], key[2]
