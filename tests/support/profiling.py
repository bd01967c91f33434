"""Reading a profiling backend's typed result the way ``/metrics`` shows it, in tests."""

from __future__ import annotations

from exporter.metrics.profiling import AVAILABILITY, FAMILIES
from exporter.readings import ProfilingStatus
from exporter.snapshot import SourceResult
from tests.support.typed import gpus_of


def status(result: SourceResult, gpu: str) -> ProfilingStatus | None:
    return gpus_of(result).get(gpu)


def sample_value(result: SourceResult, gpu: str, name: str, **lbl: str) -> float | None:
    """The value of family ``name`` on ``gpu`` whose labels include ``lbl``, or None: the
    backend's status rendered through the declared family (optional families included)."""
    s = status(result, gpu)
    if s is None:
        return None
    for fam in FAMILIES.families:
        if fam.name != name:
            continue
        for labels, value in fam.rows(s):
            if set(lbl.items()) <= set(zip(fam.labels, labels, strict=True)):
                return value
    for fam in AVAILABILITY.families:
        if fam.name == name:
            for labels, value in fam.rows((s,)):
                if set(lbl.items()) <= set(zip(fam.labels, labels, strict=True)):
                    return value
    return None


def profiling_available(result: SourceResult, gpu: str, source: str) -> tuple[float, str] | None:
    """(value, reason) of ``goodput_gpu_profiling_available`` on ``gpu``; asserts the backend."""
    s = status(result, gpu)
    if s is None:
        return None
    assert s.backend == source
    return (1.0 if s.available else 0.0), s.reason
