"""The workloads of the simulated node, one per GPU (GPU i runs ``NODE[i % len(NODE)]``).

Each is a pattern an operator meets in practice, with the counter values such a workload
shows on a Hopper GPU (README.md "Try it" lists them). Together they cover every regime the model
knows, so the demo, the tests and the local stack all see each failure mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.sim.physics import (
    THROTTLE_HW_THERMAL,
    THROTTLE_IDLE,
    Activity,
    Pattern,
    scaled,
    wiggle,
)

GIB = 1024**3


@dataclass(frozen=True)
class Workload:
    name: str
    pattern: Pattern
    processes: tuple[tuple[int, int], ...] = ()  # (pid, used bytes)
    lost_after: float | None = None  # seconds after start the GPU falls off the bus
    job: tuple[tuple[str, str], ...] = ()
    """Scheduler variables in its processes' environment (``exporter/sim/fake_proc.py``
    writes them to the simulated /proc): workloads sharing a Slurm job id are one job.
    Without any, each process is its own session: a "process" job."""


def idle(t: float) -> Activity:
    return Activity(memory_used_bytes=int(0.5 * GIB), throttle_mask=THROTTLE_IDLE)


def allocated_idle(t: float) -> Activity:
    """A notebook or a stalled job: 60 GiB held, not one kernel."""
    return Activity(memory_used_bytes=60 * GIB, throttle_mask=THROTTLE_IDLE)


_GEMM = Activity(
    util=1.0,
    mem_util=0.45,
    graphics=1.0,
    sm_active=0.97,
    sm_occupancy=0.42,
    tensor=0.86,
    hmma=0.86,
    dram=0.38,
    fp16=0.04,
    fp32=0.06,
    integer=0.08,
    pcie_tx_mib=150.0,
    pcie_rx_mib=900.0,
    memory_used_bytes=71 * GIB,
)


def compute_gemm(t: float) -> Activity:
    """Large bf16 GEMMs: tensor pipes saturated."""
    return scaled(_GEMM, wiggle(t, 2, 0.02))


def memory_decode(t: float) -> Activity:
    """LLM decode at moderate batch: streams weights and KV cache, tensor pipes mostly idle."""
    act = Activity(
        util=0.96,
        mem_util=0.9,
        graphics=0.96,
        sm_active=0.74,
        sm_occupancy=0.28,
        tensor=0.14,
        hmma=0.14,
        dram=0.83,
        fp16=0.05,
        fp32=0.09,
        integer=0.12,
        pcie_tx_mib=40.0,
        pcie_rx_mib=60.0,
        memory_used_bytes=74 * GIB,
    )
    return scaled(act, wiggle(t, 3))


def host_bound(t: float) -> Activity:
    """A synchronous host loop: short bursts of real work, then the GPU waits on the CPU."""
    phase = (t % 0.5) / 0.5
    if phase < 0.35:
        act = Activity(
            util=1.0,
            mem_util=0.3,
            graphics=1.0,
            sm_active=0.86,
            sm_occupancy=0.35,
            tensor=0.42,
            hmma=0.42,
            dram=0.3,
            fp32=0.1,
            integer=0.1,
            pcie_rx_mib=2500.0,
            memory_used_bytes=22 * GIB,
        )
    else:
        act = Activity(pcie_rx_mib=300.0, memory_used_bytes=22 * GIB)
    return act


def launch_bound(t: float) -> Activity:
    """Tiny kernels back to back: always a kernel resident, almost no SM doing anything."""
    act = Activity(
        util=0.99,
        mem_util=0.03,
        graphics=0.99,
        sm_active=0.04,
        sm_occupancy=0.01,
        tensor=0.0,
        dram=0.02,
        fp32=0.01,
        integer=0.02,
        pcie_tx_mib=5.0,
        pcie_rx_mib=5.0,
        memory_used_bytes=9 * GIB,
    )
    return scaled(act, wiggle(t, 5, 0.05))


def thermal_throttled(t: float) -> Activity:
    """The same GEMMs as GPU 2 on a GPU whose cooling fails: clocks held down."""
    act = scaled(_GEMM, 0.9 * wiggle(t, 6, 0.02))
    return Activity(**{**act.__dict__, "throttle_mask": THROTTLE_HW_THERMAL})


def lost_later(t: float) -> Activity:
    """Healthy GEMMs until the GPU falls off the bus (``lost_after``)."""
    return compute_gemm(t)


def host_to_device_stream(t: float) -> Activity:
    """Pinned host-to-device copies in 256 MiB chunks, no kernels: the copy engines keep
    NVML's utilization at 1.00 while no SM works (measured on an H200: PCIe rx 58.7 GB/s)."""
    act = Activity(
        util=1.0,
        mem_util=0.12,
        pcie_rx_mib=55_980.0,
        pcie_tx_mib=310.0,
        memory_used_bytes=20 * GIB,
    )
    return scaled(act, wiggle(t, 7, 0.01))


def sync_loop(t: float) -> Activity:
    """A training loop with a ``.item()``-style device-to-host sync per small step: kernels
    8.5 % of the time, SM active 2.3 % (measured on an H200), the GPU waits on the host."""
    act = Activity(
        util=0.085,
        mem_util=0.02,
        graphics=0.085,
        sm_active=0.023,
        sm_occupancy=0.01,
        tensor=0.004,
        hmma=0.004,
        dram=0.01,
        fp32=0.01,
        integer=0.01,
        pcie_tx_mib=1_526.0,
        pcie_rx_mib=40.0,
        memory_used_bytes=12 * GIB,
    )
    return scaled(act, wiggle(t, 8, 0.03))


def collective_wait(t: float) -> Activity:
    """A data-parallel rank that finished its share and spins in an NCCL all-reduce on a
    slower peer: kernels resident 98 % of the time, SMs barely used, NVLink 8 GB/s each
    way (measured on an H200 pair with the other rank given 3x the compute)."""
    act = Activity(
        util=0.98,
        mem_util=0.05,
        graphics=0.98,
        sm_active=0.28,
        sm_occupancy=0.06,
        tensor=0.13,
        hmma=0.13,
        dram=0.05,
        fp32=0.02,
        integer=0.03,
        nvlink_tx_mib=7_630.0,
        nvlink_rx_mib=7_630.0,
        memory_used_bytes=61 * GIB,
    )
    return scaled(act, wiggle(t, 9, 0.02))


def pageable_transfer(t: float) -> Activity:
    """A data loader without ``pin_memory``: 256 MiB host-to-device copies from pageable
    memory, no kernels. The driver stages each copy through a bounce buffer with a CPU
    memcpy, so the copy engines work 16 % of the time at 8.2 GB/s; GPM's graphics activity
    and SM active read 0 (measured on an H100: docs/validation/transfers-h100.md)."""
    act = Activity(
        util=0.16,
        mem_util=0.02,
        pcie_rx_mib=7_850.0,
        pcie_tx_mib=470.0,
        memory_used_bytes=14 * GIB,
    )
    return scaled(act, wiggle(t, 11, 0.03))


LOST_AFTER_SECONDS = 90.0

SLURM_JOB: tuple[tuple[str, str], ...] = (("SLURM_JOB_ID", "4242"), ("SLURM_STEP_ID", "0"))
"""The simulated node's one multi-GPU Slurm job: give it to the workloads that form it."""

NODE: tuple[Workload, ...] = (
    Workload("idle", idle),
    Workload("allocated_idle", allocated_idle, processes=((4101, 60 * GIB),)),
    Workload("compute_gemm", compute_gemm, processes=((4102, 71 * GIB),)),
    Workload("memory_decode", memory_decode, processes=((4103, 74 * GIB),)),
    Workload("host_bound", host_bound, processes=((4104, 22 * GIB),)),
    Workload("launch_bound", launch_bound, processes=((4105, 9 * GIB),)),
    Workload("thermal_throttled", thermal_throttled, processes=((4106, 71 * GIB),)),
    Workload(
        "lost_later", lost_later, processes=((4107, 71 * GIB),), lost_after=LOST_AFTER_SECONDS
    ),
    Workload("transfer", host_to_device_stream, processes=((4108, 20 * GIB),)),
    Workload("sync_loop", sync_loop, processes=((4109, 12 * GIB),), job=SLURM_JOB),
    Workload(
        "collective_wait", collective_wait, processes=((4110, 61 * GIB),), job=SLURM_JOB
    ),
    Workload("pageable_transfer", pageable_transfer, processes=((4111, 14 * GIB),)),
)
