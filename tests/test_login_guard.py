"""The login-flood guard's parts: the bounded per-client failure log and the check pool's
clean-first bounded queues (real threads, events instead of timing)."""

from __future__ import annotations

import asyncio
import threading

from exporter.web.login_guard import CheckPool, FailureLog
from tests.conftest import ManualClock


def test_a_client_is_logged_at_most_once_a_minute_with_what_it_sent(clock: ManualClock) -> None:
    failures = FailureLog(clock=clock)
    assert failures.failed("10.0.0.1") == 1  # the first failure is logged
    assert [failures.failed("10.0.0.1") for _ in range(50)] == [0] * 50
    assert failures.failed("10.0.0.2") == 1  # another client has its own minute
    clock.advance(59.0)
    assert failures.failed("10.0.0.1") == 0
    clock.advance(1.0)
    assert failures.failed("10.0.0.1") == 52  # everything since the last line
    assert failures.suspect("10.0.0.1") and not failures.suspect("10.0.0.3")
    clock.advance(60.0)
    assert not failures.suspect("10.0.0.1")


def test_the_client_map_is_bounded(clock: ManualClock) -> None:
    failures = FailureLog(capacity=100, clock=clock)
    for i in range(10_000):
        failures.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(failures) == 100
    assert failures.suspect("10.0.39.15")  # the most recent stay
    assert not failures.suspect("10.0.0.1")


class Gate:
    """A check that blocks its thread until released, recording the order checks ran in."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.go = threading.Event()

    def check(self, name: str) -> bool:
        self.ran.append(name)
        self.go.wait(timeout=10)
        return True


async def until(condition: object, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.005)


async def test_clean_clients_go_first_and_a_full_wait_refuses_at_once() -> None:
    suspects = {"10.0.0.66"}
    pool = CheckPool(suspects.__contains__, workers=1, max_waiting=2)
    gate = Gate()
    try:
        running = asyncio.create_task(pool.run(lambda: gate.check("busy"), "10.0.0.66"))
        await until(lambda: gate.ran == ["busy"])
        # A fresh client's check waits; its client turns suspect while it waits.
        fresh = asyncio.create_task(pool.run(lambda: gate.check("turned"), "10.0.0.77"))
        await until(lambda: pool.waiting == 1)
        suspects.add("10.0.0.77")
        flood = asyncio.create_task(pool.run(lambda: gate.check("s1"), "10.0.0.66"))
        await until(lambda: pool.waiting == 2)
        # Suspects may fill max_waiting: a third is refused without waiting...
        assert await pool.run(lambda: gate.check("s2"), "10.0.0.66") is None
        # ...while a clean client still finds room, and goes first.
        clean = asyncio.create_task(pool.run(lambda: gate.check("clean"), "10.0.0.1"))
        await until(lambda: pool.waiting == 3)
        gate.go.set()
        assert await asyncio.gather(running, clean, fresh, flood) == [True] * 4
        assert gate.ran == ["busy", "clean", "turned", "s1"]
        assert pool.waiting == 0
    finally:
        gate.go.set()
        pool.close()


async def test_a_client_that_goes_away_gives_its_place_back() -> None:
    pool = CheckPool(lambda _: False, workers=1, max_waiting=4)
    gate = Gate()
    try:
        running = asyncio.create_task(pool.run(lambda: gate.check("busy"), "a"))
        await until(lambda: gate.ran == ["busy"])
        gone = asyncio.create_task(pool.run(lambda: gate.check("gone"), "b"))
        stays = asyncio.create_task(pool.run(lambda: gate.check("stays"), "c"))
        await until(lambda: pool.waiting == 2)
        gone.cancel()
        gate.go.set()
        assert await running and await stays
        assert gate.ran == ["busy", "stays"]
        # Every slot came back: a new check runs at once.
        assert await pool.run(lambda: gate.check("after"), "d")
        assert pool.waiting == 0
    finally:
        gate.go.set()
        pool.close()
