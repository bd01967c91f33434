"""The usable peak of a GPU's host and peer links, read once at discovery.

``transfer_bound`` needs to know how close PCIe or NVLink traffic is to what the link can
carry. NVML reports the link's generation and width (PCIe) and which NVLinks are up and
their version; the per-lane and per-link rates below turn those into bytes per second per
direction. Any call the GPU or the binding does not support leaves that link unknown (0),
never an error: the model then simply cannot call the GPU transfer-bound on that link.
"""

from __future__ import annotations

from typing import Any

PCIE_LANE_BYTES_PER_SECOND: dict[int, float] = {
    1: 250e6,
    2: 500e6,
    3: 984.6e6,  # 8 GT/s, 128b/130b
    4: 1969.2e6,
    5: 3938.5e6,
    6: 7563.0e6,  # 64 GT/s, FLIT mode (242 of 256 bytes carry data)
}
"""Bytes per second per lane and direction after line encoding, by PCIe generation."""

NVLINK_LINK_BYTES_PER_SECOND: dict[int, float] = {
    1: 20e9,
    2: 25e9,
    3: 25e9,
    4: 25e9,  # Hopper: 18 links x 25 GB/s = 450 GB/s each way
    5: 50e9,  # Blackwell: 18 x 50 GB/s = 900 GB/s each way
}
"""Bytes per second per link and direction, by NVLink version as NVML numbers it."""

NVLINK_MAX_LINKS = 18


def _call(nvml: Any, name: str, *args: Any) -> Any:
    """One optional NVML call: None when it fails in any way (unsupported, older binding)."""
    try:
        return getattr(nvml, name)(*args)
    except Exception:
        return None


def pcie_peak(nvml: Any, handle: Any) -> float:
    """Per-direction usable bytes/s of the PCIe link at its maximum generation and width."""
    gen = _call(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle)
    if gen is None:
        gen = _call(nvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle)
    width = _call(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle)
    if not isinstance(gen, int) or not isinstance(width, int) or width <= 0:
        return 0.0
    return PCIE_LANE_BYTES_PER_SECOND.get(gen, 0.0) * width


def nvlink_peak(nvml: Any, handle: Any) -> float:
    """Per-direction bytes/s over all NVLinks that are up (0 with none or unknown)."""
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    total = 0.0
    for link in range(NVLINK_MAX_LINKS):
        state = _call(nvml, "nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            break  # NOT_SUPPORTED (no NVLink) or past the last link
        if state != enabled:
            continue
        version = _call(nvml, "nvmlDeviceGetNvLinkVersion", handle, link)
        total += NVLINK_LINK_BYTES_PER_SECOND.get(version if isinstance(version, int) else 0, 0.0)
    return total


def link_peaks(nvml: Any, handle: Any) -> tuple[tuple[str, float], ...]:
    """(link, per-direction peak bytes/s) for the links whose peak is known."""
    peaks = (("pcie", pcie_peak(nvml, handle)), ("nvlink", nvlink_peak(nvml, handle)))
    return tuple((link, peak) for link, peak in peaks if peak > 0)
