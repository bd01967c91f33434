"""Bounded reads for the job sources: no file under /proc or the HPC mapping directory can
wedge the daemon.

A read of ``/proc/<pid>/environ`` blocks while its process is stuck in the kernel holding
its memory map's lock (a GPU driver call in D state), and a FIFO put where a file was
expected blocks its opener until a writer comes. So every read here:

- opens with ``O_NONBLOCK | O_NOFOLLOW`` (a FIFO opens at once, a symlink is refused with
  ``ELOOP``) and checks it got a regular file (``fstat``) before reading a byte;
- runs on a daemon thread of :class:`Reader`, which waits for each item at most its
  timeout (:data:`READ_TIMEOUT`). An item that takes longer is given up: its thread is
  abandoned (it never holds the poll, the scheduler or the interpreter's exit) and the
  items after it run on a fresh thread.

A stuck read costs only itself. The item's keys (a pid and its GPUs, a file) stay *held*
while its abandoned thread is still inside the read: an item with a held key is not run
(:class:`Busy`), so a stuck process or file is never read again before its earlier read
ends, and one GPU's hung job costs one thread however many processes it has. At most
:data:`MAX_STUCK` abandoned threads may be stuck at once (a bound on threads and file
descriptors); at that many, new items wait (:class:`Unavailable`) and the source goes on
publishing what it already knows.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

READ_TIMEOUT = 1.0
"""Seconds one item (one file, or one process's few small files) may take: a procfs or
tmpfs read takes microseconds, so anything near this is stuck."""
MAX_STUCK = 64
"""Abandoned reader threads that may still be stuck at once (each holds one thread, about
64 KiB of stack touched, and one file descriptor). Keys make it one per stuck GPU or file
in practice; at this many, new items wait until one returns."""
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
_TICK = 0.05
"""Seconds between checks of a running item's age."""

T = TypeVar("T")
R = TypeVar("R")


class NotRegular(OSError):
    """The path is a FIFO, a device, a socket or a directory, not a file."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.EINVAL, "not a regular file", path)


class ReadTimeout(Exception):
    """The item took longer than the reader's bound; its thread was abandoned."""


class Unavailable(Exception):
    """The item was not read: the reader is stopping, or too many reads are stuck."""


class Busy(Unavailable):
    """The item was not read: one of its keys is held by an earlier read still stuck."""


def read_file(path: str, cap: int) -> tuple[bytes, bool]:
    """At most ``cap`` bytes of the regular file ``path`` and whether there was more.
    Raises ``OSError`` (``ELOOP`` for a symlink, :class:`NotRegular` for anything but a
    file) without blocking on a FIFO; the read itself is what :class:`Reader` bounds."""
    fd = os.open(path, OPEN_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(path)
        chunks: list[bytes] = []
        left = cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 64 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data[:cap], len(data) > cap


def read_small(path: str, cap: int) -> bytes:
    """One ``read()`` of at most ``cap`` bytes, for the start time re-read each poll: three
    system calls where :func:`read_file` takes five. Opened the same way (no FIFO blocks,
    no symlink is followed); what is read is parsed, never trusted as a file's whole."""
    fd = os.open(path, OPEN_FLAGS)
    try:
        return os.read(fd, cap)
    finally:
        os.close(fd)


def errno_reason(exc: OSError) -> str:
    """A counted reason for an unexpected ``OSError``: ``read_eio``, ``read_eisdir``,
    ``read_eloop`` (a symlink), ``read_not_regular`` (a FIFO, device or socket)."""
    if isinstance(exc, NotRegular):
        return "read_not_regular"
    name = errno.errorcode.get(exc.errno or 0, "error")
    return f"read_{name.lower()}"


class _Batch(Generic[T, R]):
    """Items run in order on one thread; the caller watches the running item's age."""

    def __init__(self, fn: Callable[[T], R], items: Sequence[T]) -> None:
        self.fn, self.items = fn, items
        self.results: list[R | BaseException] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.abandoned = False
        self.started = time.monotonic()

    def run(self) -> None:
        for item in self.items:
            try:
                result: R | BaseException = self.fn(item)
            except Exception as exc:  # handed to the caller, per item
                result = exc
            with self.lock:
                if self.abandoned:
                    return
                self.results.append(result)
                self.started = time.monotonic()
        self.done.set()

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        """True when every item ran; False once the running item outlived ``timeout`` or
        the reader is stopping (the batch is then abandoned)."""
        while not self.done.wait(_TICK):
            with self.lock:
                if len(self.results) == len(self.items):
                    return True
                if stop.is_set() or time.monotonic() - self.started > timeout:
                    self.abandoned = True
                    return False
        return True


Keys = Callable[[T], Sequence[Hashable]]
_NONE = object()


class Reader:
    """Runs blocking reads on abandonable daemon threads, each item bounded in time."""

    def __init__(
        self, name: str, timeout: float | None = None, max_stuck: int | None = None
    ) -> None:
        self.name = name
        self.timeout = READ_TIMEOUT if timeout is None else timeout
        self.max_stuck = MAX_STUCK if max_stuck is None else max_stuck
        self._stuck: list[tuple[threading.Thread, tuple[Hashable, ...]]] = []
        self._held: set[Hashable] = set()
        self._stop = threading.Event()

    def stop(self) -> None:
        """Stop waiting: a poll in progress returns at once, later ones read nothing."""
        self._stop.set()

    def stuck(self) -> int:
        """Abandoned threads still inside a read."""
        alive = [(t, keys) for t, keys in self._stuck if t.is_alive()]
        if len(alive) != len(self._stuck):
            self._stuck = alive
            self._held = {key for _, keys in alive for key in keys}
        return len(alive)

    def held(self, key: Hashable) -> bool:
        """Whether an earlier read of ``key`` is still stuck (it is not read again until
        that read ends)."""
        self.stuck()
        return key in self._held

    def map(
        self, fn: Callable[[T], R], items: Sequence[T], keys: Keys[T] | None = None,
        timeout: float | None = None,
    ) -> list[R | BaseException]:
        """``fn`` of each item, in order: its value, the exception it raised,
        :class:`ReadTimeout` (given up: its ``keys``, the item itself by default, are held
        until its thread returns), :class:`Busy` (a key is held) or :class:`Unavailable`
        (not run: the reader is stopping or too many reads are stuck)."""
        key_of: Keys[T] = keys if keys is not None else (lambda item: (item,))
        limit = self.timeout if timeout is None else timeout
        out: list[R | BaseException] = []
        pending = list(items)
        while pending:
            self.stuck()
            if self._stop.is_set() or len(self._stuck) >= self.max_stuck:
                out.extend(Unavailable(self.name) for _ in pending)
                break
            run: list[T] = []
            ahead: list[R | BaseException | None] = []
            for item in pending:  # held items are answered Busy without a thread
                if self._held and any(k in self._held for k in key_of(item)):
                    ahead.append(Busy(self.name))
                else:
                    ahead.append(None)
                    run.append(item)
            if not run:
                out.extend(a for a in ahead if a is not None)
                break
            batch = _Batch(fn, run)
            thread = threading.Thread(target=batch.run, name=self.name, daemon=True)
            thread.start()
            finished = batch.wait(limit, self._stop)
            with batch.lock:
                results = list(batch.results)
            if not finished:
                stuck_item = run[len(results)]
                held = tuple(key_of(stuck_item))
                self._stuck.append((thread, held))
                self._held.update(held)
                results.append(ReadTimeout(self.name) if not self._stop.is_set()
                               else Unavailable(self.name))
            done = iter(results)
            consumed = 0
            for answer in ahead:
                if answer is None:
                    got = next(done, _NONE)
                    if got is _NONE:
                        break
                    out.append(got)  # type: ignore[arg-type]
                else:
                    out.append(answer)
                consumed += 1
            if finished:
                break
            pending = pending[consumed:]
        return out
