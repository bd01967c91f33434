"""The efficiency model: from one window of one GPU's counters to a verdict.

Pure: no I/O, no clock. :func:`assess` is a function of a single :class:`Window`;
:class:`GpuModel` adds the per-GPU memory (hysteresis) across windows. docs/efficiency.md
documents every rule and threshold used here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exporter.model import regimes
from exporter.model.config import ModelConfig
from exporter.model.flops import peak_flops
from exporter.model.hysteresis import Hysteresis
from exporter.util import clamp_ratio as _ratio
from exporter.util import finite as _finite

# The regimes the rules below name, re-exported from their one declaration (model/regimes.py).
IDLE = regimes.IDLE
ALLOCATED_IDLE = regimes.ALLOCATED_IDLE
HOST_BOUND = regimes.HOST_BOUND
LAUNCH_BOUND = regimes.LAUNCH_BOUND
MEMORY_BOUND = regimes.MEMORY_BOUND
COMPUTE_BOUND = regimes.COMPUTE_BOUND
COMM_WAIT = regimes.COMM_WAIT
TRANSFER_BOUND = regimes.TRANSFER_BOUND
UNKNOWN = regimes.UNKNOWN
REGIMES: tuple[str, ...] = regimes.NAMES
"""Every regime's name, in the declaration's order."""
HOLLOW_BUSY = "hollow_busy"
BUSY_NO_OUTPUT = "busy_no_output"
UNPRODUCTIVE_REASONS: tuple[str, ...] = (HOLLOW_BUSY, BUSY_NO_OUTPUT)


@dataclass(frozen=True)
class ModelRates:
    """What one served model on this GPU did over the window (attributed serving counters)."""

    model: str
    tokens_per_second: float
    """Computed token kinds (prompt + generation; cached prompt tokens excluded): every one
    costs a forward pass."""
    efficiency_tokens_per_second: float
    """Only ``ModelConfig.efficiency_token_kinds`` (generation by default)."""
    flops_per_second: float | None = None
    """From the engine's own estimated-FLOPs counter, when it exports one."""
    requests_running: float = 0.0
    requests_waiting: float = 0.0


@dataclass(frozen=True)
class Window:
    """One window of one GPU. Ratios are 0..1 averages over the window; None = not read."""

    seconds: float = 1.0
    util: float | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    fp_active: float | None = None
    """The busiest non-tensor FP pipe (fp64, fp32, fp16)."""
    graphics_active: float | None = None
    profiling_available: bool = False
    profiling_age_seconds: float | None = None
    """Seconds since the profiling counters last moved; None when not known."""
    power_watts: float | None = None
    power_limit_watts: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    processes: int | None = None
    serving: tuple[ModelRates, ...] | None = None
    """None when no serving counters are attributed to this GPU."""
    nvlink_bytes_per_second: float | None = None
    """NVLink traffic, both directions: what a rank waiting in a collective moves."""
    link_use: tuple[tuple[str, float], ...] = ()
    """(pcie | nvlink, busier direction's bytes/s over that link's usable peak) for the
    links whose traffic and peak are both known."""
    bus_bytes_per_second: tuple[tuple[str, str, float], ...] = ()
    """(pcie | nvlink, rx | tx, bytes/s) for every link direction whose traffic is read,
    whether or not the link's peak is known."""
    collectives_per_second: float | None = None
    """NCCL collectives this GPU's processes launch per second (NCCL's RAS count); None
    where no RAS endpoint tells it."""
    gpu_name: str = ""
    mig_profile: str = ""


@dataclass(frozen=True)
class Assessment:
    """Everything :func:`assess` concludes from a single window (no memory)."""

    regime: str
    profiling_stale: bool
    silent_zeros: bool
    hollow_busy: bool
    busy_no_output: bool
    hollow_utilization: float | None
    efficiency_score: float | None
    tokens_per_sm_second: float | None
    joules_per_token: float | None
    mfu: float | None
    mfu_above_peak: bool = False
    strong: bool = False
    """The window alone is conclusive (at a roofline wall, saturating a link, or making
    tokens): the debounce enters its regime at once instead of after ``enter_windows``."""

    @property
    def usable(self) -> bool:
        return self.regime != UNKNOWN


@dataclass(frozen=True)
class Verdict:
    """The debounced verdict :class:`GpuModel` publishes for one window."""

    regime: str
    hollow_busy: bool
    busy_no_output: bool
    window: Assessment

    @property
    def busy_unproductive(self) -> bool:
        return self.hollow_busy or self.busy_no_output


# helpers -------------------------------------------------------------------------------------
def _clean(w: Window) -> Window:
    """A copy of ``w`` with every ratio clamped to 0..1 and every non-finite number dropped."""
    from dataclasses import replace

    return replace(
        w,
        seconds=max(_finite(w.seconds) or 0.0, 0.0),
        util=_ratio(w.util),
        sm_active=_ratio(w.sm_active),
        sm_occupancy=_ratio(w.sm_occupancy),
        tensor_active=_ratio(w.tensor_active),
        dram_active=_ratio(w.dram_active),
        fp_active=_ratio(w.fp_active),
        graphics_active=_ratio(w.graphics_active),
        profiling_age_seconds=_finite(w.profiling_age_seconds),
        power_watts=_finite(w.power_watts),
        power_limit_watts=_finite(w.power_limit_watts),
        memory_used_bytes=_finite(w.memory_used_bytes),
        memory_total_bytes=_finite(w.memory_total_bytes),
    )


def _profiling_ratios(w: Window) -> list[float]:
    values = (
        w.sm_active,
        w.sm_occupancy,
        w.tensor_active,
        w.dram_active,
        w.fp_active,
        w.graphics_active,
    )
    return [v for v in values if v is not None]


def bus_rate(w: Window) -> float:
    """The busiest link direction's bytes/s (0 when no link traffic is read)."""
    return max((max(rate, 0.0) for _, _, rate in w.bus_bytes_per_second), default=0.0)


def bus_fed(w: Window, cfg: ModelConfig) -> bool:
    """Link traffic at or above the floor: the GPU is being fed (or drained) over the bus.

    The floor sits far above what an idle GPU's driver and monitoring move (0.3-0.6 MB/s
    measured) and far below the slowest deliberate transfer worth naming.
    """
    return bus_rate(w) >= cfg.bus_floor_bytes_per_second


def copy_time(w: Window) -> float | None:
    """Share of the window the copy engines alone kept the GPU busy, or None if unknown.

    NVML's utilization counts copy-engine work as "busy" (1.00 on a pinned copy stream with
    no kernel), GPM's graphics activity does not (0.00 on the same stream), so their
    difference is copy time during which no kernel ran. It only names a bus-fed window's
    pace (:func:`fed_regime`, a threshold): as a share of time it is unsafe, because the two
    readings come from different pollers and clipping their difference at 0 turns every
    misalignment into copy time. The time split uses :func:`host_copy_time`.
    """
    if w.util is None or w.graphics_active is None:
        return None
    return max(w.util - w.graphics_active, 0.0)


PCIE_FALLBACK_BYTES_PER_SECOND = 63e9
"""PCIe Gen5 x16's usable rate per direction, for a GPU whose link NVML does not describe."""
COPY_EFFICIENCY = 0.9
"""Share of the link's usable peak a pinned copy reaches: 0.93 on H100 (58.7 of 63 GB/s),
0.90 on H200 (a 512 MiB host-to-device copy per step at 25.6 GB/s took 0.45 of the ranks'
time)."""


def host_copy_time(w: Window) -> float:
    """Share of the window the copy engines need to move this GPU's PCIe bytes: the busier
    direction over what a pinned copy reaches of the link's usable peak
    (:data:`COPY_EFFICIENCY`), 0..1.

    Measured by what moves the bytes, over the same window as the rest of the profiling
    counters, so a checkpoint's device-to-host copy is its bytes' time and the seconds
    that follow on the host stay host time. A copy slower than the link (pageable memory
    staged by the CPU, many small copies) reads as the time its bytes need at full rate:
    the rest is the host's.
    """
    for link, use in w.link_use:
        if link == "pcie":
            return min(max(use, 0.0) / COPY_EFFICIENCY, 1.0)
    return min(link_rate(w, "pcie") / (PCIE_FALLBACK_BYTES_PER_SECOND * COPY_EFFICIENCY), 1.0)


def silent_zeros(w: Window, cfg: ModelConfig) -> bool:
    """Every profiling ratio exactly 0 while kernels run and the board draws power.

    A GPU cannot run kernels for most of a window without a single SM being active; DCGM's
    profiling module is known to return all zeros when it has lost its counters. Power is
    checked when both it and the limit are known; otherwise kernel time alone decides.
    """
    ratios = _profiling_ratios(w)
    if not w.profiling_available or not ratios or any(v != 0.0 for v in ratios):
        return False
    if link_use(w) > 0.01 or bus_fed(w, cfg):
        return False  # the counters are alive: link traffic with idle SMs is a copy
    if w.util is None or w.util < cfg.silent_zero_util_min:
        return False
    if w.power_watts is not None and w.power_limit_watts:
        return w.power_watts / w.power_limit_watts >= cfg.silent_zero_power_min_ratio
    return True


def kernel_time(w: Window, usable: bool) -> float | None:
    """The kernel-time ratio the model reasons with.

    The profiling reader's own graphics-engine activity (GPM GRAPHICS_UTIL, DCGM
    GR_ENGINE_ACTIVE) when profiling is usable: it covers exactly the window SM active was
    averaged over and agrees with NVML's figure on steady loads (37 vs 37.1 measured). Else
    NVML's utilization, whose own sample period need not match the window.
    """
    if usable and w.graphics_active is not None:
        return w.graphics_active
    return w.util


def sm_fill(w: Window, busy: float | None) -> float | None:
    """SM activity while a kernel runs: sm_active / kernel time, 0..1."""
    if w.sm_active is None or not busy:
        return None
    return min(w.sm_active / busy, 1.0)


def _compute_pressure(w: Window, cfg: ModelConfig) -> float | None:
    """How close the tensor / FP pipes are to the compute_bound threshold (1 = at it)."""
    parts = []
    if w.tensor_active is not None and cfg.compute_tensor_min > 0:
        parts.append(w.tensor_active / cfg.compute_tensor_min)
    if w.fp_active is not None and cfg.compute_fp_min > 0:
        parts.append(w.fp_active / cfg.compute_fp_min)
    return max(parts) if parts else None


def _memory_pressure(w: Window, cfg: ModelConfig) -> float | None:
    if w.dram_active is None or cfg.memory_dram_min <= 0:
        return None
    return w.dram_active / cfg.memory_dram_min


def _allocated(w: Window, cfg: ModelConfig) -> bool:
    if w.processes:
        return True
    if w.memory_used_bytes is not None and w.memory_total_bytes:
        return w.memory_used_bytes / w.memory_total_bytes >= cfg.allocated_memory_min_ratio
    return False


def _waiting(w: Window) -> float:
    return sum(m.requests_waiting for m in w.serving or ())


def _at_a_wall(w: Window, cfg: ModelConfig) -> bool:
    return (_compute_pressure(w, cfg) or 0.0) >= 1.0 or (_memory_pressure(w, cfg) or 0.0) >= 1.0


def link_rate(w: Window, link: str) -> float:
    """The busier direction's bytes/s over ``link`` (pcie | nvlink); 0 when not read."""
    return max((max(r, 0.0) for name, _, r in w.bus_bytes_per_second if name == link),
               default=0.0)


def _on_the_bus(w: Window, cfg: ModelConfig) -> bool:
    """PCIe moves at least ``comm_min_bytes_per_second``: hollow kernel time is then the
    bus's, not tiny kernels' (launch_bound) and not wasted (hollow_busy)."""
    return link_rate(w, "pcie") >= cfg.comm_min_bytes_per_second


def link_use(w: Window) -> float:
    """The busiest link's use of its usable peak (0 when no link is known)."""
    return max((use for _, use in w.link_use), default=0.0)


def transferring(w: Window, cfg: ModelConfig, usable: bool) -> bool:
    """A link near its usable peak while the SMs do little: the copy engines are the work.

    Copies count as "utilization" in NVML (the utilization lie again: 1.00 with SM active
    0.00 on a host-to-device stream), and GPM's graphics activity reads them as nothing,
    so this is checked before the idle rule.
    """
    if not usable or link_use(w) < cfg.transfer_link_min_ratio:
        return False
    return (w.sm_active or 0.0) < cfg.launch_sm_fill_max and not _at_a_wall(w, cfg)


def fed_regime(w: Window, cfg: ModelConfig) -> str:
    """transfer_bound or host_bound for a bus-fed window with few or no kernels.

    Copy engines busy for most of the window: the bus is the bottleneck, whatever rate it
    reaches (small copies are latency-bound far below the link's peak). Copy engines idle
    for most of it: something on the host sets the pace (pageable memory staged through a
    bounce buffer by the CPU, a throttled producer, page faults served by the driver).
    """
    ce = copy_time(w)
    if ce is not None and ce >= cfg.transfer_copy_time_min:
        return TRANSFER_BOUND
    if link_rate(w, "nvlink") >= max(link_rate(w, "pcie"), cfg.comm_min_bytes_per_second):
        # Fed over NVLink by a peer GPU: the peer's copy engines or SMs do the writing, so
        # this GPU's own copy time reads 0 (400 GB/s received at utilization 0.00 measured).
        # The host cannot pace a link it is not on.
        return TRANSFER_BOUND
    return HOST_BOUND


def classify(w: Window, cfg: ModelConfig, usable: bool) -> str:
    """The raw regime of one window (rules in the order docs/efficiency.md lists them)."""
    if transferring(w, cfg, usable):
        return TRANSFER_BOUND
    busy = kernel_time(w, usable)
    if busy is None:
        return UNKNOWN
    fed = bus_fed(w, cfg)
    if busy <= cfg.idle_util_max and not fed:
        return ALLOCATED_IDLE if _allocated(w, cfg) else IDLE
    if not usable:
        return UNKNOWN
    if busy < cfg.host_low_duty_max:
        # Kernels (or copies) in the window, but few: the GPU waits on the host (a sync per
        # small step, a data loader, pageable copies) or on the bus, whatever they look like.
        return fed_regime(w, cfg) if fed else HOST_BOUND
    compute = _compute_pressure(w, cfg)
    memory = _memory_pressure(w, cfg)
    fill = sm_fill(w, busy)
    if fill is not None and fill < cfg.launch_sm_fill_max and not _at_a_wall(w, cfg):
        # A rank spinning in a collective looks hollow too, but moves data over the links.
        if (w.nvlink_bytes_per_second or 0.0) >= cfg.comm_min_bytes_per_second:
            return COMM_WAIT
        if _on_the_bus(w, cfg):
            # Hollow "kernel" time while PCIe moves gigabytes: small pageable copies show as
            # graphics activity with no SM active (0.31 at 3.5 GB/s measured). The bus, not
            # the kernels, is the work; copy time names who paces it.
            return fed_regime(w, cfg)
        return LAUNCH_BOUND
    host_max = cfg.host_util_max_queued if _waiting(w) > 0 else cfg.host_util_max
    if busy < host_max:
        return HOST_BOUND
    if compute is None and memory is None:
        return UNKNOWN
    # Busy and filling the SMs: name the nearest roofline wall.
    return COMPUTE_BOUND if (compute or 0.0) >= (memory or 0.0) else MEMORY_BOUND


def conclusive(w: Window, regime: str, cfg: ModelConfig, tokens: float | None) -> bool:
    """Whether one window is enough evidence to enter ``regime`` at once.

    A serving burst lasts seconds; waiting ``enter_windows`` to leave ``allocated_idle``
    hid most of it. Saturating a wall or a link, or making tokens while kernels run, is
    not noise.
    """
    if regime == TRANSFER_BOUND:
        return link_use(w) >= cfg.transfer_link_min_ratio  # a saturated link, not a trickle
    declared = regimes.BY_NAME[regime]
    if declared.wall and _at_a_wall(w, cfg):
        return True
    return declared.busy and (tokens or 0.0) >= cfg.no_output_tokens_per_second


def _wall_activity(w: Window, regime: str) -> float | None:
    compute = [v for v in (w.tensor_active, w.fp_active) if v is not None]
    if regime == COMPUTE_BOUND and compute:
        return max(compute)
    if regime == MEMORY_BOUND and w.dram_active is not None:
        return w.dram_active
    known = [*compute, *([w.dram_active] if w.dram_active is not None else [])]
    return max(known) if known else None


def efficiency_score(w: Window, regime: str, cfg: ModelConfig) -> float | None:
    """0..1: weighted SM active, occupancy and the activity of the wall the regime names,
    times an output factor when serving counters are attributed. None when unknown."""
    if regime == UNKNOWN:
        return None
    if regimes.BY_NAME[regime].quiet:
        return 0.0
    terms = (
        (cfg.score_weights.get("sm_active", 0.0), w.sm_active),
        (cfg.score_weights.get("occupancy", 0.0), w.sm_occupancy),
        (cfg.score_weights.get("wall", 0.0), _wall_activity(w, regime)),
    )
    known = [(weight, v) for weight, v in terms if v is not None and weight > 0]
    total = sum(weight for weight, _ in known)
    if total <= 0:
        return None
    score = sum(weight * v for weight, v in known) / total
    if w.serving is not None and cfg.no_output_tokens_per_second > 0:
        tokens = sum(max(m.tokens_per_second, 0.0) for m in w.serving)
        score *= min(tokens / cfg.no_output_tokens_per_second, 1.0)
    return min(max(score, 0.0), 1.0)


def mfu(w: Window, cfg: ModelConfig) -> tuple[float | None, bool]:
    """(MFU 0..1 or None, whether the raw value exceeded the peak).

    Above the peak is not a fast GPU but a wrong input (a parameter count, a dtype, an
    engine's FLOPs estimate): the MFU is then absent and flagged, never clipped to 1.

    Each model's FLOP/s come from the engine's counter when present, else
    tokens/s x 2 x parameters; each is divided by the peak of that model's dtype. None when
    the GPU's peak or a producing model's FLOPs are unknown.
    """
    if not w.serving:
        return None, False
    total = 0.0
    for m in w.serving:
        flops = _finite(m.flops_per_second)
        if flops is None:
            params = cfg.model_parameters.get(m.model)
            if params is None:
                if m.tokens_per_second > 0:
                    return None, False
                continue
            flops = max(m.tokens_per_second, 0.0) * 2.0 * params
        dtype = cfg.model_dtypes.get(m.model, cfg.mfu_dtype)
        peak = peak_flops(w.gpu_name, dtype, cfg.peak_flops, w.mig_profile)
        if peak is None:
            return None, False
        total += max(flops, 0.0) / peak
    if not math.isfinite(total):
        return None, False
    if total > 1.0:
        return None, True
    return total, False


def assess(window: Window, cfg: ModelConfig) -> Assessment:
    """Everything one window says on its own; :class:`GpuModel` debounces it."""
    w = _clean(window)
    zeros = silent_zeros(w, cfg)
    old = w.profiling_age_seconds is not None and w.profiling_age_seconds > cfg.stale_after_seconds
    stale = w.profiling_available and (zeros or old)
    usable = w.profiling_available and not stale and w.sm_active is not None
    regime = classify(w, cfg, usable)
    busy = kernel_time(w, usable)
    hollow = None
    if usable and busy is not None and w.sm_active is not None:
        hollow = max(busy - w.sm_active, 0.0)
    fill = sm_fill(w, busy) if usable else None
    tokens = None if w.serving is None else sum(m.tokens_per_second for m in w.serving)
    per_sm, joules = _token_rates(w, cfg, usable)
    mfu_value, above = mfu(w, cfg)
    return Assessment(
        regime=regime,
        profiling_stale=stale,
        silent_zeros=zeros,
        hollow_busy=_hollow_busy(w, cfg, regime, hollow, fill),
        busy_no_output=_busy_no_output(w, cfg, tokens, busy, usable),
        hollow_utilization=hollow,
        efficiency_score=efficiency_score(w, regime, cfg),
        tokens_per_sm_second=_finite(per_sm),
        joules_per_token=_finite(joules),
        mfu=mfu_value,
        mfu_above_peak=above,
        strong=conclusive(w, regime, cfg, tokens),
    )


def _hollow_busy(
    w: Window, cfg: ModelConfig, regime: str, hollow: float | None, fill: float | None
) -> bool:
    """Kernels resident but the SMs mostly idle (launch-bound), not explained by waiting
    on a peer or the bus, nor by memory pressure."""
    memory = _memory_pressure(w, cfg) or 0.0
    return bool(
        not regimes.BY_NAME[regime].moves_data
        and not _on_the_bus(w, cfg)
        and hollow is not None
        and fill is not None
        and hollow >= cfg.hollow_min
        and fill < cfg.launch_sm_fill_max
        and memory < 1.0
    )


def _busy_no_output(
    w: Window, cfg: ModelConfig, tokens: float | None, busy: float | None, usable: bool
) -> bool:
    """A serving GPU busy with kernels while its engines produce (almost) no tokens."""
    return bool(
        tokens is not None
        and busy is not None
        and busy >= cfg.no_output_util_min
        and tokens < cfg.no_output_tokens_per_second
        and (usable or not cfg.no_output_needs_profiling)
    )


def _token_rates(w: Window, cfg: ModelConfig, usable: bool) -> tuple[float | None, float | None]:
    """(efficiency tokens per SM-second, joules per efficiency token); None where the
    window cannot say."""
    if w.serving is None:
        return None, None
    eff_tokens = sum(max(m.efficiency_tokens_per_second, 0.0) for m in w.serving)
    per_sm = None
    if usable and w.sm_active is not None and w.sm_active >= max(cfg.min_sm_active_for_rate, 1e-9):
        per_sm = eff_tokens / w.sm_active
    joules = None
    if eff_tokens and w.power_watts is not None and eff_tokens > 0:
        joules = max(w.power_watts, 0.0) / eff_tokens
    return per_sm, joules


class GpuModel:
    """Per-GPU state: debounces the regime and both busy_unproductive reasons."""

    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        self._regime = Hysteresis(
            UNKNOWN,
            cfg.enter_windows,
            cfg.leave_windows,
            leave_for={UNKNOWN: 1},
            immediate=frozenset({UNKNOWN}),
        )
        self._flags = {
            reason: Hysteresis(False, cfg.enter_windows, cfg.leave_windows, enter_for={False: 1})
            for reason in UNPRODUCTIVE_REASONS
        }

    def debounce(self, a: Assessment) -> Verdict:
        """Feed one window's assessment (possibly adjusted by the node step) through the
        hysteresis of the regime and of both flags."""
        # One conclusive window ends a quiet spell at once (a burst); moves between two
        # busy regimes stay debounced so they do not flap.
        quiet = regimes.BY_NAME[self._regime.state].quiet
        regime = self._regime.update(a.regime, at_once=a.strong and quiet)
        flags = {HOLLOW_BUSY: a.hollow_busy, BUSY_NO_OUTPUT: a.busy_no_output}
        for reason, tracker in self._flags.items():
            if a.regime == UNKNOWN and not flags[reason]:
                tracker.force(False)  # nothing is called unproductive on unusable evidence
            else:
                tracker.update(flags[reason])
        return Verdict(
            regime=regime,
            hollow_busy=self._flags[HOLLOW_BUSY].state,
            busy_no_output=self._flags[BUSY_NO_OUTPUT].state,
            window=a,
        )
