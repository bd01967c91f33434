"""The collector registry: the only list of collectors.

A leaf module (it imports nothing from the exporter), read by
``exporter/collectors/__init__.py``, which loads each collector's declaration, and by the
settings, which compose one section per collector and check ``collectors:`` against it.
"""

from __future__ import annotations

COLLECTOR_NAMES: tuple[str, ...] = (
    "gpu", "nvml", "xid", "profiling", "kubelet", "cgroup", "jobs", "nccl", "serving", "model"
)
"""The collector registry, in order. Each name is a module ``exporter/collectors/<name>.py``
whose ``COLLECTOR`` declares it; adding a collector is that module and one name here."""
