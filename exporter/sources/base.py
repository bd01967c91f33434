"""The one small interface every source implements."""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures

from exporter.snapshot import SourceResult


class Source(abc.ABC):
    """Reads one thing on its own cadence.

    ``poll`` returns a complete result; an exception escaping it is caught by the scheduler
    and turned into a failed result, so a bug in one source never stops the others.
    """

    name: str = "source"
    interval: float = 1.0
    #: Lists the GPUs others match against (publishes a ``GpuReading``): started first, so
    #: the rest see an inventory at their first poll, and the daemon is ready once one has
    #: listed GPUs.
    starts_first: bool = False
    #: Each publish is a GPU poll (NVML, a profiling backend): the efficiency model steps
    #: after it, at most once per model interval.
    gpu_poll: bool = False

    async def start(self) -> None:
        """Acquire resources (open libraries, register events). Errors here are reported
        as a failed first poll, not raised."""

    @abc.abstractmethod
    async def poll(self) -> SourceResult: ...

    async def close(self) -> None:
        """Release resources; called once on shutdown."""


class BlockingSource(Source):
    """A source whose calls block (NVML, DCGM): runs them on a thread of its own.

    One thread per source keeps calls into one library serialised (GPM samples are not
    thread-safe) and lets a wedged call stall only its own source.
    """

    def __init__(self) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"source-{self.name}"
        )

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self.open)

    async def poll(self) -> SourceResult:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.poll_blocking)

    async def close(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self.shutdown)
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def open(self) -> None:
        """Blocking part of :meth:`start`."""

    @abc.abstractmethod
    def poll_blocking(self) -> SourceResult:
        """Blocking part of :meth:`poll` (one verb for a source's act: poll)."""

    def shutdown(self) -> None:
        """Blocking part of :meth:`close`."""
