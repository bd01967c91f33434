"""The node step: every GPU of the node at once, with its job, from one snapshot.

The scheduler calls :meth:`NodeModel.step` after each GPU poll and publishes the returned
:class:`~exporter.readings.NodeVerdicts` into the next snapshot; the model is not a source and
never publishes back into what it reads. Per-GPU logic stays pure (``core.assess``); this
step composes it: it assesses every GPU, then looks at the GPUs of each multi-GPU job
together (a rank waiting in a collective is judged against its peers), then debounces.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import structlog

from exporter.config import ModelConfig
from exporter.model.core import (
    ALLOCATED_IDLE,
    COMM_WAIT,
    IDLE,
    LAUNCH_BOUND,
    UNKNOWN,
    Assessment,
    GpuModel,
    Verdict,
    Window,
    assess,
)
from exporter.model.windows import WindowBuilder
from exporter.readings import GpuVerdict, JobVerdict, NodeVerdicts
from exporter.snapshot import Snapshot
from exporter.util import OnChange

log = structlog.get_logger("model")

_NOT_WORKING = frozenset({IDLE, ALLOCATED_IDLE, UNKNOWN})


def work(w: Window) -> float:
    """How hard a GPU's SMs work: the larger of SM active and tensor activity."""
    return max(w.sm_active or 0.0, w.tensor_active or 0.0)


def find_straggler(
    job: Mapping[str, tuple[Window, Assessment]], cfg: ModelConfig
) -> tuple[str, frozenset[str]]:
    """(the GPU holding a job back, the peers waiting on it), or ("", {}) when balanced.

    A straggler works at least ``straggler_gap`` harder than every other busy GPU of the
    job, and those others look hollow (launch_bound or comm_wait): they run kernels that
    barely fill the SMs, the signature of spinning in a collective. A balanced job, or one
    whose GPUs are all busy doing work, has none.
    """
    busy = {gpu: wa for gpu, wa in job.items() if wa[1].regime not in _NOT_WORKING}
    if len(busy) < 2:
        return "", frozenset()
    top = max(busy, key=lambda g: work(busy[g][0]))
    peers = [g for g in busy if g != top]
    waiting = all(
        work(busy[top][0]) - work(busy[g][0]) >= cfg.straggler_gap
        and busy[g][1].regime in (LAUNCH_BOUND, COMM_WAIT)
        for g in peers
    )
    return (top, frozenset(peers)) if waiting else ("", frozenset())


class NodeModel:
    """Carries the per-GPU memory (hysteresis, counter history) between steps."""

    def __init__(self, cfg: ModelConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.clock = clock
        self._builder = WindowBuilder(cfg)
        self._models: dict[str, GpuModel] = {}
        self._unproductive: dict[str, float] = {}
        self._regime_seconds: dict[str, dict[str, float]] = {}
        self._last_now: float | None = None
        self._log = OnChange(log)

    def step(self, snap: Snapshot, interval: float = 1.0) -> NodeVerdicts:
        now = self.clock()
        seconds = interval if self._last_now is None else max(now - self._last_now, 0.0)
        self._last_now = now
        self._builder.bad_inputs = []
        assessed: dict[str, tuple[Window, Assessment]] = {}
        for device in snap.inventory:
            window = self._builder.build(snap, device, now, seconds)
            assessed[device.gpu] = (window, assess(window, self.cfg))
        jobs, peers_of = self._jobs(snap, assessed)
        verdicts: dict[str, GpuVerdict] = {}
        errors: dict[str, int] = {}
        for gpu, (_window, a) in assessed.items():
            model = self._models.setdefault(gpu, GpuModel(self.cfg))
            v = model.debounce(a)
            verdicts[gpu] = self._verdict(gpu, v, seconds, peers_of.get(gpu, ()))
            if a.mfu_above_peak:
                errors["mfu_implausible"] = errors.get("mfu_implausible", 0) + 1
            self._log_changes(gpu, v)
        if self._builder.bad_inputs:
            errors["non_finite_input"] = len(self._builder.bad_inputs)
        self._log(
            "bad_inputs",
            ",".join(sorted(set(self._builder.bad_inputs))),
            "",
            event="model_input_not_finite",
            level="warning",
        )
        return NodeVerdicts(gpus=verdicts, jobs=jobs, errors=errors)

    def _jobs(
        self, snap: Snapshot, assessed: dict[str, tuple[Window, Assessment]]
    ) -> tuple[tuple[JobVerdict, ...], dict[str, tuple[str, ...]]]:
        """Judge the GPUs of each multi-GPU job together (pods sharing a job label, else one
        pod); waiting peers become comm_wait."""
        jobs: list[JobVerdict] = []
        peers_of: dict[str, tuple[str, ...]] = {}
        for (namespace, job), gpus in snap.pods.job_gpus().items():
            mine = {g: assessed[g] for g in gpus if g in assessed}
            if len(mine) < 2:
                continue
            straggler, waiting = find_straggler(mine, self.cfg)
            for gpu in waiting:
                w, a = assessed[gpu]
                assessed[gpu] = (w, replace(a, regime=COMM_WAIT, hollow_busy=False))
            for gpu in mine:
                peers_of[gpu] = tuple(g for g in sorted(mine) if g != gpu)
            jobs.append(JobVerdict(namespace, job, tuple(sorted(mine)), straggler))
            self._log(
                ("straggler", namespace, job),
                straggler,
                "",
                event="job_straggler_changed",
                namespace=namespace,
                job=job,
            )
        return tuple(jobs), peers_of

    def _verdict(self, gpu: str, v: Verdict, seconds: float, peers: tuple[str, ...]) -> GpuVerdict:
        total = self._unproductive.get(gpu, 0.0) + (seconds if v.busy_unproductive else 0.0)
        self._unproductive[gpu] = total
        per_regime = self._regime_seconds.setdefault(gpu, {})
        per_regime[v.window.regime] = per_regime.get(v.window.regime, 0.0) + seconds
        a = v.window
        return GpuVerdict(
            regime=v.regime,
            window_regime=a.regime,
            hollow_busy=v.hollow_busy,
            busy_no_output=v.busy_no_output,
            profiling_stale=a.profiling_stale,
            hollow_utilization=a.hollow_utilization,
            efficiency_score=a.efficiency_score,
            tokens_per_sm_second=a.tokens_per_sm_second,
            joules_per_token=a.joules_per_token,
            mfu=a.mfu,
            busy_unproductive_seconds=total,
            regime_seconds=tuple(sorted(per_regime.items())),
            peers=peers,
        )

    def _log_changes(self, gpu: str, v: Verdict) -> None:
        """One log line per change of regime, flag, profiling health or MFU sanity."""
        a = v.window
        health = "silent_zeros" if a.silent_zeros else ("stale" if a.profiling_stale else "ok")
        # "unknown" is where every GPU starts: the first line is its first real verdict.
        self._log((gpu, "regime"), v.regime, "unknown", event="regime_changed", gpu=gpu)
        flags = [name for name, on in (("hollow_busy", v.hollow_busy),
                                       ("busy_no_output", v.busy_no_output)) if on]
        self._log(
            (gpu, "flags"),
            "+".join(flags) or "none",
            "none",
            event="busy_unproductive_changed",
            gpu=gpu,
        )
        self._log(
            (gpu, "health"),
            health,
            "ok",
            event="profiling_health_changed",
            level="info" if health == "ok" else "warning",
            gpu=gpu,
        )
        if a.mfu_above_peak:
            self._log(
                (gpu, "mfu"),
                True,
                False,
                event="mfu_above_peak",
                level="warning",
                gpu=gpu,
                hint="check model.model_parameters, dtype and per-GPU token split",
            )
        else:
            self._log.reset((gpu, "mfu"), False)
