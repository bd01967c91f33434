"""Simulated serving engines beside the simulated node (``--simulate-engines``, ``make run``),
so the quick start shows tokens/s and joules per token, not only the GPUs.

The same two the local stack runs (scripts/stack.py), served by this process on loopback
ports the kernel picks, on a thread of their own: a vLLM decoding 2,400 tokens/s on the
memory-bound GPU 3, and one holding the compute-bound GPU 2 that has stopped producing
tokens (busy, no output). The serving source scrapes them over HTTP like any engine.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

from exporter.sim.fake_engine import FakeEngine, serve


@dataclass(frozen=True)
class SimulatedEngine:
    model: str
    generation_rate: float
    gpu: str


ENGINES = (
    SimulatedEngine("sim/llama-3-8b", 2400.0, "3"),
    SimulatedEngine("sim/mixtral-8x7b", 0.0, "2"),
)


def start(engines: tuple[SimulatedEngine, ...] = ENGINES, timeout: float = 10.0) -> list[
    dict[str, Any]
]:
    """Serve ``engines`` on 127.0.0.1 until the process ends; their serving targets
    (``{"url": ..., "gpus": [...]}``). Raises OSError when they cannot start."""
    loop = asyncio.new_event_loop()
    urls: list[str] = []
    ready = threading.Event()
    failed: list[BaseException] = []

    async def bind() -> None:
        for e in engines:
            engine = FakeEngine(e.model, e.generation_rate, prompt_rate=e.generation_rate)
            runner = await serve(engine)
            urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}/metrics")

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(bind())
        except Exception as exc:  # told to start(), which raises it in one line
            failed.append(exc)
            return
        finally:
            ready.set()
        loop.run_forever()

    threading.Thread(target=run, name="simulated-engines", daemon=True).start()
    if not ready.wait(timeout) or failed:
        reason = failed[0] if failed else f"not serving after {timeout:.0f} s"
        raise OSError(f"the simulated serving engines did not start: {reason}")
    return [{"url": url, "gpus": [e.gpu]} for url, e in zip(urls, engines, strict=True)]
