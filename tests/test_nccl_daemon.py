"""The real daemon on the simulated node with NCCL's RAS port on loopback: two of its GPU
processes (pids 4102 and 4103, on GPUs 2 and 3) are the ranks of a 2-GPU job whose
collectives /metrics counts on their GPUs only."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support.daemon import daemon
from tests.support.fake_ras import FakeRas, Rank, document


class RasThread:
    """A FakeRas on its own event loop, so the daemon's polls are answered while the test
    blocks; ``count`` grows by ``per_second`` of wall time."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self.started = time.monotonic()
        self.port = 0
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)

    def doc(self) -> dict[str, object]:
        n = int((time.monotonic() - self.started) * self.per_second)
        return document({"0x5eed": [Rank(0, 4102, 2, {"AllReduce": n}),
                                    Rank(1, 4103, 3, {"AllReduce": n}),
                                    Rank(2, 4104, 0, {"AllReduce": n}, host="10.0.0.9")]})

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        async with FakeRas(self.doc()) as fake:
            self.port = fake.port
            self._ready.set()
            while not self._stop.is_set():
                fake.doc = self.doc()
                await asyncio.sleep(0.05)

    def __enter__(self) -> RasThread:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with RasThread(per_second=1000.0) as ras, daemon(
            "--simulate", "--interval", "0.5", "--nccl-interval", "0.5",
            "--nccl-ras-address", f"127.0.0.1:{ras.port}") as base:
        yield base


def _series(url: str, name: str) -> dict[str, float]:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, _, value = line.rpartition(" ")
            out[labels[len(name):]] = float(value)
    return out


def test_the_ranks_collectives_are_counted_on_their_gpus(url: str) -> None:
    first = _series(url, "goodput_gpu_collectives_total")
    time.sleep(3.0)
    later = _series(url, "goodput_gpu_collectives_total")
    assert sorted(later) == ['{gpu="2",node="vm"}', '{gpu="3",node="vm"}'], later
    for key, value in later.items():
        assert 2000 <= value - first.get(key, 0.0) <= 4500  # 1,000 a second for 3 s
    assert list(_series(url, "goodput_nccl_ras_answered").values()) == [1.0]
    assert list(_series(url, "goodput_nccl_communicators").values()) == [1.0]
