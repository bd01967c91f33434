"""The model's settings section (``model:``): its thresholds live with the model, so the
rules import a plain pydantic section and never the collector registry."""

from __future__ import annotations

from pydantic import Field, field_validator

from exporter.model import straggler
from exporter.settings.section import Section


class ModelConfig(Section):
    """Thresholds of the efficiency model; docs/efficiency.md explains each default.

    Ratios are 0..1 window averages (kernel-time ``util``, ``sm_active``...).
    ``sm_fill`` is ``sm_active / util``: how much of the GPU a kernel fills while one runs.
    """

    interval: float | None = Field(default=None, ge=0.5, le=60)
    """Seconds between model evaluations (one "window"); None means the daemon interval."""
    enter_windows: int = Field(default=3, ge=1, le=100)
    """Consecutive windows a new regime (or a busy_unproductive flag) must hold to be entered."""
    leave_windows: int = Field(default=2, ge=1, le=100)
    """Consecutive windows the current regime (or flag) must be absent before it is left."""
    idle_util_max: float = Field(default=0.01, ge=0, le=1)
    """Kernel time at or below this is idle (or allocated_idle when memory or a process is held).
    Low on purpose: a sync-per-step loop runs kernels 2-9 % of the time and is host_bound."""
    allocated_memory_min_ratio: float = Field(default=0.05, ge=0, le=1)
    """Memory used above this share of the total counts as allocated even without a process."""
    launch_sm_fill_max: float = Field(default=0.35, ge=0, le=1)
    """sm_fill below this while kernels run means tiny kernels / skinny GEMMs: launch_bound."""
    host_low_duty_max: float = Field(default=0.15, ge=0, le=1)
    """Kernel time below this (and above idle) is host_bound whatever the kernels look like:
    a sync-per-step loop measured 8.5 % utilization with SM active 2.3 %."""
    host_util_max: float = Field(default=0.7, ge=0, le=1)
    """Kernel time below this (with kernels that do fill the SMs) means host_bound."""
    host_util_max_queued: float = Field(default=0.9, ge=0, le=1)
    """Same, when the attributed engine has requests waiting (work exists, GPU not fed)."""
    compute_tensor_min: float = Field(default=0.4, ge=0, le=1)
    """Tensor-pipe activity at or above this is compute_bound."""
    compute_fp_min: float = Field(default=0.5, ge=0, le=1)
    """Any FP pipe (fp64/fp32/fp16) activity at or above this is compute_bound."""
    memory_dram_min: float = Field(default=0.5, ge=0, le=1)
    """DRAM bandwidth at or above this share of peak is memory_bound."""
    transfer_link_min_ratio: float = Field(default=0.5, ge=0, le=1)
    """PCIe or NVLink traffic in one direction at or above this share of the link's usable
    peak, with the SMs nearly idle, is transfer_bound (58.7 of 63 GB/s measured on a
    pinned host-to-device stream)."""
    bus_floor_bytes_per_second: float = Field(default=50e6, ge=0)
    """PCIe or NVLink traffic (the busiest link direction) at or above this means the GPU is
    fed over the bus: never idle or allocated_idle. An idle H100/H200 reads 0.3-0.6 MB/s."""
    transfer_copy_time_min: float = Field(default=0.4, ge=0, le=1)
    """In a bus-fed window with few kernels, copy-engine time (NVML utilization minus GPM
    graphics activity) at or above this is transfer_bound; below it the host sets the pace
    (pageable staging, a throttled producer): host_bound."""
    collective_floor_bytes_per_second: float = Field(default=10e3, ge=0)
    """NVLink traffic (both directions) at or above this means a GPU of a multi-GPU job
    takes part in collectives, so its hollow time beyond its own kernels' is waiting: a
    barrier-like 4-byte all-reduce per step moved 48 KB/s each way on H200, an idle or lone
    GPU's NVLink reads exactly 0."""
    comm_min_bytes_per_second: float = Field(default=1e9, ge=0)
    """NVLink traffic (both directions) at or above this, with kernels that barely fill the
    SMs, is a rank waiting in a collective (comm_wait), not tiny kernels (launch_bound); PCIe
    traffic (busier direction) at or above it with such kernels is bus work: transfer_bound or
    host_bound by copy-engine time, never launch_bound or hollow_busy."""
    straggler_gap: float = Field(default=straggler.GAP, ge=0, le=1)
    """A GPU of a multi-GPU job holds the job back when a peer exchanging data over its links
    waits at least this much more of its time than it does (and at least twice as much),
    for ``straggler_confirm_seconds`` on end. Measured on four H200: 0.17-0.19 for peers of
    a rank doing 10 % more work, under 0.03 between the ranks of a balanced job
    (docs/efficiency.md). Its default is declared once (exporter/model/straggler.py): the
    GPUJobStraggler rule's ``min_waiting_gap`` is the same."""
    straggler_window_seconds: float = Field(default=3.0, ge=1, le=600)
    """Time constant of the smoothing behind the straggler comparison (a running mean over
    a job's first seconds, so no one window weighs more than the others)."""
    straggler_confirm_seconds: float = Field(default=10.0, ge=0, le=3600)
    """A straggler is named once the same GPU has held the others back this long without a
    break, and dropped once it has not for ``straggler_window_seconds``: imbalance that
    moves between ranks, a late joiner's first seconds and a job's start name nobody."""
    collective_sm_active: float = Field(default=0.18, ge=0, lt=1)
    """SM active of a rank spinning in a collective (NCCL keeps some SMs resident), used when
    the tensor pipes cannot tell it: 0.18-0.20 measured on H200 (NCCL all-reduce, a rank
    waiting 82-96 % of the time)."""
    p2p_sm_active: float = Field(default=0.0, ge=0, lt=1)
    """The same for a rank whose link traffic goes one way (a pipeline stage blocked in a
    send or receive): NCCL's point-to-point kernels keep almost no SM busy."""
    own_hollow_ratio: float = Field(default=0.06, ge=0, lt=0.5)
    """Hollow time of a job's own compute kernels per second of them (a GEMM leaves SMs
    empty as it ramps up and in its last wave), used where the job's counters cannot tell
    its own (docs/jobs.md): on H200 0.035-0.05 for 8192-square bf16 GEMMs, 0.067-0.072
    for 4096-square ones alone and 0.09 next to small all-reduces, 0.084-0.095 for
    3072-square ones. A job with a rank that waits next to nothing is capped below it."""
    tensor_per_sm_active_second: float = Field(default=0.955, gt=0, le=1)
    """Tensor-pipe activity per SM-active second of a job's GEMMs: 0.948-0.971 on H200 for
    bf16 and FP16 GEMMs from 4096- to 8192-square (0.92 for 3072, 0.865 for 2048, 0.55 for
    1024). With it the tensor counter tells the SM activity of the job's compute from its
    collectives', and with the kernels' own hollowness how long its compute kernels ran."""
    collective_latency_seconds: float = Field(default=9e-6, ge=0, le=1e-3)
    """GPU time one NCCL collective takes alone at the least, whatever bytes it moves: where
    NCCL's RAS tells how many a GPU launches, its transfer time is at least that many of
    these (else its link bytes at ``collective_link_bytes_per_second``). 8.5-11 us for
    2-float to 256 KB all-reduces between two H200 over NVLink, by the ranks' own timing
    of the collectives alone (docs/validation/split-h200.md)."""
    collective_ramp_seconds: float = Field(default=8e-6, ge=0, le=1e-3)
    """Hollow time the tensor-core kernels next to each collective show beyond their own
    steady hollowness (they refill the SMs after it): not waiting. On H200 the GEMMs of a
    decode step ran 9.5-17 us per collective longer than alone, and their tensor activity
    per second fell from 0.90 (4096- to 8192-square alone) to 0.77-0.84; after a spinning
    one-thread kernel they are 3-6 us hollower (docs/validation/nccl-ras-h200.md). Fitted
    on the decode steps' replay; every job row passed live with it on two H200."""
    collective_link_bytes_per_second: float = Field(default=190e9, gt=0)
    """Bytes per second one direction of a GPU's NVLink carries while a collective's
    transfer runs: link bytes over this are transfer time, not waiting. Fitted on H200
    (NVLink NV18) to the ranks' own timing of the transfer alone: 8 MiB all-reduces ran at
    170-177 GB/s on two GPUs and 215-224 GB/s on four, larger ones at 280-330 GB/s; 190
    keeps every measured row within 0.05 (docs/validation/lost-h200.md)."""
    comm_wait_share_min: float = Field(default=0.5, ge=0, le=1)
    """A rank that waits on its job's straggler for at least this share of the time reads
    comm_wait; one that waits less keeps its own regime (the counter still counts it)."""
    hollow_min: float = Field(default=0.3, ge=0, le=1)
    """hollow_busy needs util - sm_active at least this (plus sm_fill under launch_sm_fill_max)."""
    no_output_util_min: float = Field(default=0.5, ge=0, le=1)
    """busy_no_output needs kernel time at least this..."""
    no_output_tokens_per_second: float = Field(default=1.0, ge=0)
    """...while the attributed engine makes fewer tokens per second than this."""
    no_output_needs_profiling: bool = True
    """Suppress busy_no_output too while profiling is unusable (the conservative reading)."""
    silent_zero_util_min: float = Field(default=0.5, ge=0, le=1)
    """Every profiling ratio exactly 0 while util >= this (and power high) is a broken reader."""
    silent_zero_power_min_ratio: float = Field(default=0.2, ge=0, le=1)
    """"Power high" for silent zeros: power / power limit at or above this."""
    stale_after_seconds: float = Field(default=30.0, gt=0)
    """Profiling (or serving) input older than this is stale."""
    min_sm_active_for_rate: float = Field(default=0.01, ge=0, le=1)
    """tokens_per_sm_second is not published below this SM activity (the ratio explodes)."""
    holders_max_per_gpu: int = Field(default=8, ge=0, le=64)
    """Holders (pods' containers, else processes) of one shared GPU published on their own;
    the rest are folded into one ``pid="other"`` holder and counted (holders_over_cap).
    0 turns per-holder verdicts off."""
    holder_memory_seconds: float = Field(default=300.0, ge=10, le=86400)
    """Half-life of the windows the per-holder SM activity is unmixed from: evidence of a
    different mix (a holder starting, stopping, bursting) counts half after this long."""
    score_weights: dict[str, float] = Field(
        default_factory=lambda: {"sm_active": 0.3, "occupancy": 0.2, "wall": 0.5}
    )
    """Weights of the efficiency score terms (normalised over the terms that are known)."""
    efficiency_token_kinds: list[str] = Field(default_factory=lambda: ["generation"])
    """Token kinds counted by tokens_per_sm_second and joules_per_token."""
    model_parameters: dict[str, float] = Field(default_factory=dict)
    """Parameters per served model name (active parameters for MoE), for 2 x N FLOPs/token."""
    mfu_dtype: str = "bf16"
    """Dtype whose peak dense FLOP/s divides achieved FLOP/s (bf16, fp16, fp8, tf32, fp32...)."""
    model_dtypes: dict[str, str] = Field(default_factory=dict)
    """Per-model dtype overriding mfu_dtype."""
    peak_flops: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Peak dense FLOP/s by GPU-name substring and dtype; checked before the built-in table."""

    @field_validator("score_weights")
    @classmethod
    def _check_weights(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = set(value) - {"sm_active", "occupancy", "wall"}
        if unknown:
            raise ValueError(f"unknown score weight(s) {sorted(unknown)}")
        if any(w < 0 for w in value.values()) or sum(value.values()) <= 0:
            raise ValueError("score weights must be >= 0 with a positive sum")
        return value
