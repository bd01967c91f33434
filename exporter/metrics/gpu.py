"""The vendor-neutral GPU series: identity, health, utilization, memory, power, energy,
temperature, clocks, throttling, ECC and processes of every GPU that any GPU source lists.

They read the typed readings every GPU source publishes (a ``GpuReading``: ``Device`` and
``GpuState``, joined across sources by ``Snapshot.inventory`` and ``Snapshot.gpu_states``),
never a source of their own, so a second vendor's GPUs fill the same alerts and dashboards
as NVML's: its source fills the ``GpuState`` fields it can read, and a field left None is a
series left out. The ``gpu`` collector (``exporter/collectors/gpu.py``) owns them.
"""

from __future__ import annotations

from exporter.metrics.families import Family, GpuFamilies, by_label, counter, gauge
from exporter.readings import Device, GpuState

COLLECTOR = "gpu"


def _up(s: GpuState) -> list[tuple[tuple[str, ...], float]]:
    return [((s.reason,), 1.0 if s.up else 0.0)]


STATE_FAMILIES: tuple[Family[GpuState], ...] = (
    Family(
        "goodput_gpu_up",
        "gauge",
        "1 if the last poll of this device by its GPU source succeeded; 0 with `reason` "
        "(gpu_lost, no_permission, discovery_failed, error, ...) if not.",
        _up,
        labels=("reason",),
    ),
    gauge(
        "goodput_gpu_utilization_ratio",
        "Share of the last poll window in which any kernel ran (nvidia-smi's utilization), "
        "as the GPU's source reads it (NVML: averaged from its utilization samples). Says "
        "nothing about how many SMs did work.",
        lambda s: s.utilization,
        unit="ratio",
    ),
    counter(
        "goodput_gpu_utilization_seconds_total",
        "Seconds with a kernel resident: the source's utilization samples (NVML's), each "
        "times the time it covers, or its polls'.",
        lambda s: s.utilization_seconds,
        unit="seconds",
    ),
    Family(
        "goodput_gpu_utilization_method_info",
        "gauge",
        "Constant 1, labelled with how goodput_gpu_utilization_ratio is read on this GPU: "
        "samples (the driver's utilization samples averaged over the poll window) or "
        "last_period (the driver's own last sample period, nvmlDeviceGetUtilizationRates on "
        "NVML, which a burst or a host stall can miss).",
        lambda s: (((s.utilization_method,), 1.0),) if s.utilization_method else (),
        labels=("method",),
        default=False,
    ),
    gauge(
        "goodput_gpu_memory_controller_utilization_ratio",
        "Share of the last sample period device memory was read or written.",
        lambda s: s.memory_controller_utilization,
        unit="ratio",
        default=False,
    ),
    gauge(
        "goodput_gpu_memory_used_bytes",
        "Device memory in use.",
        lambda s: s.memory_used_bytes,
        unit="bytes",
    ),
    gauge(
        "goodput_gpu_memory_total_bytes",
        "Device memory in total.",
        lambda s: s.memory_total_bytes,
        unit="bytes",
    ),
    gauge(
        "goodput_gpu_power_watts",
        "Board power draw as the driver reads it (NVML's power usage).",
        lambda s: s.power_watts,
        unit="watts",
    ),
    gauge(
        "goodput_gpu_power_limit_watts",
        "Enforced board power limit.",
        lambda s: s.power_limit_watts,
        unit="watts",
        default=False,
    ),
    counter(
        "goodput_gpu_energy_joules_total",
        "Energy consumed since the driver loaded; rate() gives watts.",
        lambda s: s.energy_joules,
        unit="joules",
    ),
    gauge(
        "goodput_gpu_temperature_celsius",
        "GPU die temperature.",
        lambda s: s.temperature_celsius,
        unit="celsius",
    ),
    by_label(
        "goodput_gpu_clock_hertz",
        "gauge",
        "Current clock by domain (sm, memory).",
        "domain",
        lambda s: s.clocks_hertz,
        unit="hertz",
        default=False,
    ),
    by_label(
        "goodput_gpu_clock_max_hertz",
        "gauge",
        "Maximum clock by domain (sm, memory).",
        "domain",
        lambda s: s.max_clocks_hertz,
        unit="hertz",
        default=False,
    ),
    by_label(
        "goodput_gpu_clock_event_active",
        "gauge",
        "1 while a clock-event (throttle) reason holds the clocks down.",
        "reason",
        lambda s: s.clock_events,
        default=False,
    ),
    by_label(
        "goodput_gpu_clock_event_seconds_total",
        "counter",
        "Time the clocks were held down, by reason, as counted by the driver. A reason's "
        "series appears once the driver has counted time for it (most GPUs never see most "
        "reasons).",
        "reason",
        lambda s: tuple((reason, v) for reason, v in s.clock_event_seconds if v > 0),
        unit="seconds",
    ),
    by_label(
        "goodput_gpu_ecc_errors_total",
        "counter",
        "ECC errors since the driver loaded (volatile), by type (corrected, uncorrected).",
        "type",
        lambda s: s.ecc_errors,
    ),
    by_label(
        "goodput_gpu_remapped_rows_total",
        "counter",
        "Memory rows remapped, by cause (correctable, uncorrectable).",
        "cause",
        lambda s: s.remapped_rows,
        default=False,
    ),
    gauge(
        "goodput_gpu_row_remap_pending",
        "1 if a row remap is pending (takes effect at the next GPU reset).",
        lambda s: s.row_remap_pending,
    ),
    gauge(
        "goodput_gpu_row_remap_failure",
        "1 if a row remap failed: the GPU needs service.",
        lambda s: s.row_remap_failure,
    ),
    gauge(
        "goodput_gpu_processes",
        "Compute processes running on the device.",
        lambda s: s.process_count,
    ),
)

IDENTITY_LABELS = (
    "uuid",
    "name",
    "pci_bus_id",
    "driver_version",
    "mig_parent_uuid",
    "gpu_instance_id",
    "compute_instance_id",
    "mig_profile",
)


def _identity(d: Device) -> list[tuple[tuple[str, ...], float]]:
    values = (
        d.uuid,
        d.name,
        d.pci_bus_id,
        d.driver_version,
        d.parent_uuid,
        d.gpu_instance_id,
        d.compute_instance_id,
        d.mig_profile,
    )
    return [(values, 1.0)]


IDENTITY = GpuFamilies[Device](
    COLLECTOR,
    lambda snap: {d.gpu: d for d in snap.inventory},
    (
        Family(
            "goodput_gpu_info",
            "gauge",
            "Constant 1 per GPU or MIG instance; the only series carrying its identity "
            "(join it on node and gpu for the UUID, model name or MIG profile).",
            _identity,
            labels=IDENTITY_LABELS,
        ),
        by_label(
            "goodput_gpu_link_peak_bytes_per_second",
            "gauge",
            "Usable bytes per second per direction of the GPU's PCIe link (at its maximum "
            "generation and width) and of all its NVLinks together: what transfer_bound "
            "compares traffic with. Absent where the GPU's source does not tell.",
            "link",
            lambda d: d.link_peaks,
            default=False,
        ),
    ),
)
STATE = GpuFamilies[GpuState](COLLECTOR, lambda snap: snap.gpu_states, STATE_FAMILIES)
