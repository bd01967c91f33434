"""NCCL collectives counted where a rank launches them, so the [split] bench can check the
exporter's ``goodput_gpu_collectives_total`` (NCCL's RAS count per rank) against the ranks'
own count (issue 46: a tensor-parallel decode's latency-bound all-reduces).

:class:`CountedDist` stands in for ``torch.distributed``: every call of a collective NCCL
counts (all-reduce, all-gather, reduce-scatter, broadcast, reduce, and ``barrier``, which
torch's NCCL group runs as a one-element all-reduce) adds one before it is launched; send,
receive and batched isend/irecv are point-to-point and NCCL's collective count leaves them
out, so they pass uncounted, as does everything else. Launches inside :meth:`aside` (the
transfer-alone and kernels-alone timings) are counted in ``total`` but not in ``steps``: NCCL
sees them, the steps' own figure does not hold them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

COUNTED = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor",
    "reduce_scatter", "reduce_scatter_tensor", "broadcast", "reduce", "barrier",
})
"""torch.distributed calls that launch one NCCL collective each."""


class CountedDist:
    """``torch.distributed`` with a count of the collectives launched through it."""

    def __init__(self, dist: Any) -> None:
        self._dist = dist
        self.total = 0
        """Every collective launched (what NCCL's RAS count sees)."""
        self._aside = 0
        self._depth = 0

    @property
    def steps(self) -> int:
        """The collectives launched outside :meth:`aside`: the job's steps' own."""
        return self.total - self._aside

    @contextmanager
    def aside(self) -> Iterator[None]:
        """Collectives launched in here are not the steps' (timings between steps)."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def __getattr__(self, name: str) -> Any:
        got = getattr(self._dist, name)
        if name not in COUNTED:
            return got
        return self._counting(got)

    def _counting(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def launch(*args: Any, **kwargs: Any) -> Any:
            self.total += 1
            if self._depth:
                self._aside += 1
            return call(*args, **kwargs)

        return launch


@contextmanager
def aside(dist: Any) -> Iterator[None]:
    """:meth:`CountedDist.aside` for a ``dist`` that may not count (one GPU, a plain module)."""
    if isinstance(dist, CountedDist):
        with dist.aside():
            yield
    else:
        yield
