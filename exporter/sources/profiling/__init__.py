"""Profiling counters (SM active, occupancy, tensor, DRAM, pipes, PCIe/NVLink) from NVML GPM,
DCGM or a node's dcgm-exporter: one package, one selection path (:mod:`select`), the modes
written once (:mod:`modes`), the same typed window whichever backend read it."""
