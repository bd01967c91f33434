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

from exporter.model.config import ModelConfig
from exporter.model.core import (
    COMM_WAIT,
    Assessment,
    GpuModel,
    Verdict,
    Window,
    assess,
)
from exporter.model.holders import HolderModel
from exporter.model.job_identity import resolve
from exporter.model.jobs import PARTS, JobTracker, judge
from exporter.model.windows import WindowBuilder
from exporter.readings import (
    GpuVerdict,
    HolderVerdict,
    JobIdentity,
    JobVerdict,
    NodeVerdicts,
    PodUsageReading,
    ServingState,
)
from exporter.snapshot import Snapshot
from exporter.util import OnChange

log = structlog.get_logger("model")

class NodeModel:
    """Carries the per-GPU memory (hysteresis, counter history) between steps."""

    def __init__(self, cfg: ModelConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.clock = clock
        self._builder = WindowBuilder(cfg)
        self._models: dict[str, GpuModel] = {}
        self._unproductive: dict[str, float] = {}
        self._regime_seconds: dict[str, dict[str, float]] = {}
        self._trackers: dict[JobIdentity, JobTracker] = {}
        self._waited: dict[tuple[JobIdentity, str], float] = {}
        self._parts: dict[tuple[JobIdentity, str, str], float] = {}
        self._last_now: float | None = None
        self._holders = HolderModel(cfg)
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
        gpu_jobs = resolve(snap)  # once per step: what the verdicts judge and job info says
        jobs, peers_of = self._jobs(gpu_jobs, assessed, seconds)
        verdicts: dict[str, GpuVerdict] = {}
        errors: dict[str, int] = {}
        for gpu, (_window, a) in assessed.items():
            model = self._models.setdefault(gpu, GpuModel(self.cfg))
            v = model.debounce(a)
            verdicts[gpu] = self._verdict(gpu, v, seconds, peers_of.get(gpu, ()))
            if a.mfu_above_peak:
                errors["mfu_implausible"] = errors.get("mfu_implausible", 0) + 1
            self._log_changes(gpu, v)
        holders = self._shared(snap, assessed, errors)
        if self._builder.bad_inputs:
            errors["non_finite_input"] = len(self._builder.bad_inputs)
        self._log(
            "bad_inputs",
            ",".join(sorted(set(self._builder.bad_inputs))),
            "",
            event="model_input_not_finite",
            level="warning",
        )
        return NodeVerdicts(gpus=verdicts, jobs=jobs, holders=holders, errors=errors,
                            gpu_jobs=gpu_jobs)

    def _shared(
        self,
        snap: Snapshot,
        assessed: dict[str, tuple[Window, Assessment]],
        errors: dict[str, int],
    ) -> dict[str, tuple[HolderVerdict, ...]]:
        """Per shared GPU, what each holder did (exporter/model/holders.py); holders past
        the cap are counted as ``holders_over_cap``."""
        states = snap.gpu_states
        usage = snap.get(PodUsageReading)
        serving = snap.get(ServingState)
        out: dict[str, tuple[HolderVerdict, ...]] = {}
        for gpu, (window, a) in assessed.items():
            usable = (window.profiling_available and not a.profiling_stale
                      and window.sm_active is not None)
            rows, folded = self._holders.step(gpu, window, usable, states.get(gpu), usage,
                                              serving)
            if rows:
                out[gpu] = rows
            if folded:
                errors["holders_over_cap"] = errors.get("holders_over_cap", 0) + folded
        for gpu in self._holders.gpus() - set(assessed):
            self._holders.forget(gpu)
        return out

    def _jobs(
        self,
        gpu_jobs: Mapping[str, JobIdentity],
        assessed: dict[str, tuple[Window, Assessment]],
        seconds: float,
    ) -> tuple[tuple[JobVerdict, ...], dict[str, tuple[str, ...]]]:
        """Judge the GPUs of each multi-GPU job together (``gpu_jobs``: this step's one
        resolution, whatever source named the job, exporter/model/jobs.py): name its
        straggler, count each GPU's waited seconds and time split, and turn the
        mostly-waiting ranks into comm_wait."""
        by_job: dict[JobIdentity, list[str]] = {}
        for gpu, identity in gpu_jobs.items():
            if gpu in assessed:
                by_job.setdefault(identity, []).append(gpu)
        # A job of a source whose launches span nodes is judged with one GPU here too
        # (JobSource.spans_nodes): its waiting and split need no peer on this node.
        by_job = {job: sorted(gpus) for job, gpus in by_job.items()
                  if len(gpus) >= 2 or job.spans_nodes}
        self._forget(set(by_job))
        jobs = [self._judge_job(job, gpus, assessed, seconds)
                for job, gpus in sorted(by_job.items(), key=lambda kv: kv[0].key)]
        peers_of = {g: tuple(p for p in j.gpus if p != g) for j in jobs for g in j.gpus}
        return tuple(jobs), peers_of

    def _judge_job(
        self,
        identity: JobIdentity,
        gpus: list[str],
        assessed: dict[str, tuple[Window, Assessment]],
        seconds: float,
    ) -> JobVerdict:
        tracker = self._trackers.setdefault(identity, JobTracker())
        judgement = judge({g: assessed[g] for g in gpus}, tracker, seconds, self.cfg)
        waited: list[tuple[str, float]] = []
        for gpu in gpus:
            share = judgement.waited_share.get(gpu, 0.0)
            total = self._waited.get((identity, gpu), 0.0) + share * seconds
            self._waited[(identity, gpu)] = total
            waited.append((gpu, total))
            self._add_parts(identity, gpu, judgement.parts.get(gpu), seconds)
            mostly = share >= self.cfg.comm_wait_share_min
            if gpu in judgement.waiting or mostly:
                w, a = assessed[gpu]
                regime = COMM_WAIT if mostly else a.regime
                assessed[gpu] = (w, replace(a, regime=regime, hollow_busy=False))
        self._log(
            ("straggler", identity.key),
            judgement.straggler,
            "",
            event="job_straggler_changed",
            job_source=identity.source,
            namespace=identity.namespace,
            job_id=identity.job_id,
        )
        parts = tuple((gpu, part, self._parts.get((identity, gpu, part), 0.0))
                      for gpu in gpus for part in PARTS if (identity, gpu, PARTS[0]) in self._parts)
        return JobVerdict(identity, tuple(gpus), judgement.straggler, tuple(waited), parts)

    def _add_parts(self, identity: JobIdentity, gpu: str, shares: Mapping[str, float] | None,
                   seconds: float) -> None:
        """Integrate this window's split (nothing when kernel time is unknown)."""
        if shares is None:
            return
        for part in PARTS:
            key = (identity, gpu, part)
            self._parts[key] = self._parts.get(key, 0.0) + shares.get(part, 0.0) * seconds

    def _forget(self, live: set[JobIdentity]) -> None:
        """Drop the memory of jobs that ended (their counters go with their series)."""
        for job in set(self._trackers) - live:
            del self._trackers[job]
        for key in [k for k in self._waited if k[0] not in live]:
            del self._waited[key]
        for part_key in [k for k in self._parts if k[0] not in live]:
            del self._parts[part_key]

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
