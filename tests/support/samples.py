"""Reading samples back out of a SourceResult in tests."""

from __future__ import annotations

from exporter.snapshot import SourceResult


def sample_value(result: SourceResult, gpu: str, name: str, **lbl: str) -> float | None:
    """The value of ``name`` on ``gpu`` whose labels include ``lbl``, or None."""
    for s in result.devices.get(gpu, ()):
        if s.name == name and set(lbl.items()) <= set(s.labels):
            return s.value
    return None


def profiling_available(result: SourceResult, gpu: str, source: str) -> tuple[float, str] | None:
    """(value, reason) of ``goodput_gpu_profiling_available`` on ``gpu``; asserts the source."""
    for s in result.devices.get(gpu, ()):
        if s.name == "goodput_gpu_profiling_available":
            d = dict(s.labels)
            assert d["source"] == source
            return s.value, d["reason"]
    return None
