"""Small builders of typed readings and snapshots, so a test states only what it cares about.

Everything here builds the same frozen dataclasses the sources publish
(``exporter/readings.py``); nothing speaks metric names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exporter.model.core import GpuModel, Verdict, Window, assess
from exporter.readings import (
    ContainerGpus,
    Device,
    GpuState,
    NvmlReading,
    PodAssignments,
    ProfilingReading,
    ProfilingStatus,
    ProfilingWindow,
    ServedModel,
    ServingState,
)
from exporter.snapshot import Snapshot, SnapshotStore, SourceResult

H100 = "NVIDIA H100 80GB HBM3"


def device(gpu: str = "0", name: str = H100, mig_profile: str = "") -> Device:
    """A whole GPU, or a MIG instance ``<parent>-<gi>`` when ``mig_profile`` is given."""
    if not mig_profile:
        return Device(gpu, f"GPU-{gpu}", name)
    parent, _, gi = gpu.partition("-")
    return Device(
        gpu,
        f"MIG-{gpu}",
        f"{name} MIG {mig_profile}",
        parent_uuid=f"GPU-{parent}",
        gpu_instance_id=gi,
        compute_instance_id="0",
        mig_profile=mig_profile,
    )


def gpu_state(
    util: float = 1.0,
    power: float = 500.0,
    *,
    power_limit: float = 700.0,
    memory_used: float = 70e9,
    memory_total: float = 80e9,
    processes: int = 1,
) -> GpuState:
    """An NVML reading of a device that is up."""
    return GpuState(
        utilization=util,
        power_watts=power,
        power_limit_watts=power_limit,
        memory_used_bytes=memory_used,
        memory_total_bytes=memory_total,
        process_count=processes,
    )


def window(
    sm_active: float,
    *,
    graphics: float = 1.0,
    occupancy: float = 0.3,
    tensor: float = 0.0,
    dram: float = 0.1,
    nvlink: float | None = None,
) -> ProfilingWindow:
    """One second of profiling ratios; ``nvlink`` is bytes/s each way."""
    links = () if nvlink is None else (("rx", nvlink), ("tx", nvlink))
    return ProfilingWindow(
        1.0,
        graphics_active=graphics,
        sm_active=sm_active,
        sm_occupancy=occupancy,
        tensor_active=tensor,
        dram_active=dram,
        nvlink_bytes_per_second=links,
    )


def profiling(
    w: ProfilingWindow | None, *, backend: str = "gpm", sequence: int = 1, reason: str = ""
) -> ProfilingStatus:
    """A backend's status on one GPU: available with ``w``, else unavailable with ``reason``."""
    if w is None:
        return ProfilingStatus(backend, False, reason or "unsupported")
    return ProfilingStatus(backend, True, window=w, sequence=sequence)


def served(
    tokens: float, *, model: str = "llama-8b", engine: str = "vllm", flops: float | None = None
) -> ServedModel:
    """A served model whose cumulative generation count is ``tokens``."""
    return ServedModel(model, engine, tokens=(("generation", tokens),), flops=flops)


def job(*gpus: str, pod: str = "train-0", namespace: str = "ml") -> PodAssignments:
    """One pod holding ``gpus`` (a multi-GPU job when more than one)."""
    entry = ContainerGpus(
        namespace, pod, "main", "nvidia.com/gpu", tuple(f"GPU-{g}" for g in gpus), gpus
    )
    return PodAssignments((entry,))


def results(
    devices: Iterable[Device],
    states: Mapping[str, GpuState] | None = None,
    windows: Mapping[str, ProfilingStatus] | None = None,
    *,
    pods: PodAssignments | None = None,
    serving: Mapping[str, tuple[ServedModel, ...]] | None = None,
    timestamp: float = 1.0,
) -> list[SourceResult]:
    """The results nvml, gpm, kubelet and serving would publish for one poll."""
    devices = tuple(devices)
    out = [
        SourceResult(
            source="nvml",
            timestamp=timestamp,
            reading=NvmlReading(
                inventory=devices,
                gpus=dict(states if states is not None else {d.gpu: gpu_state() for d in devices}),
            ),
        )
    ]
    if windows is not None:
        reading = ProfilingReading(dict(windows))
        out.append(SourceResult(source="gpm", timestamp=timestamp, reading=reading))
    if pods is not None:
        out.append(SourceResult(source="kubelet", timestamp=timestamp, reading=pods))
    if serving is not None:
        state = ServingState(gpus=dict(serving))
        out.append(SourceResult(source="serving", timestamp=timestamp, reading=state))
    return out


def snapshot_with(*published: SourceResult, node: str = "node-a") -> Snapshot:
    """The snapshot a store holds after ``published``, in order."""
    store = SnapshotStore(node, ready_sources=["nvml"], profiling_order=("gpm", "dcgm"))
    for result in published:
        store.publish(result)
    return store.current


def gpus_of(result: SourceResult) -> Mapping[str, object]:
    """A per-GPU reading's map (NVML, XID, profiling), empty when the poll read nothing."""
    reading = result.reading
    return getattr(reading, "gpus", {}) if reading is not None else {}


def evaluate(model: GpuModel, window: Window) -> Verdict:
    """One GPU's verdict for one window, as the node step makes it when no peer adjusts it."""
    return model.debounce(assess(window, model.cfg))
