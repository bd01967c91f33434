"""What the serving source keeps about one target, in one object keyed by its normalised
URL, so adding, reloading and forgetting a target is one operation."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import structlog

from exporter.readings import TargetStatus
from exporter.sources.serving.accumulate import Ledger
from exporter.sources.serving.adapter import Settler
from exporter.sources.serving.attribution import NONE, Attribution
from exporter.sources.serving.scrape import Outcome
from exporter.sources.serving.targets import Target
from exporter.util import OnChange

log = structlog.get_logger("serving")


@dataclass
class TargetState:
    """Everything the source keeps about one target, so adding, reloading and forgetting
    a target is one operation on one object (keyed by the target's normalised URL)."""

    target: Target
    ledger: Ledger
    identity: tuple[str, str] | None = None
    """(engine, models) of the last reading."""
    logged: tuple[str, str] | None = None
    """("up", "") or ("down", reason) as last logged."""
    attribution: Attribution = NONE
    pid: tuple[int | None, float] | None = None
    """(pid listening on the target's port, when looked up)."""
    unattributed: str = ""
    models: tuple[str, ...] = ()
    """Admitted model labels of the last reading."""
    flapped: bool = False
    """Its start time once changed with no sign of a restart (logged once)."""
    v1_model: tuple[str, str, float] | None = None
    """(process start token, model id from /v1/models, when asked)."""
    once: OnChange = field(default_factory=lambda: OnChange(log))
    """Its log-once states (model cap hit, implausible values, start-time flapping)."""
    settler: Settler = field(default_factory=Settler)
    """Live estimates settling on the engine's exact count (llama.cpp generation)."""
    task: asyncio.Task[Outcome] | None = None
    """Its scrape in flight (one at a time; it may outlast a round)."""
    slow: bool = False
    """Its last scrape outlasted a round: later rounds do not wait for it."""
    slow_scrape: bool = False
    """Its last scrape ran past half a round or was cut: the next one waits for the slow
    share of the pool (waiting for a slot does not count)."""
    status: TargetStatus | None = None
    """Its last published health, repeated while a scrape is in flight."""
