"""A running workload, as the GPU benchmarks see it: ``python -m bench.gpu.workloads NAME``
in its own session, its JSON events collected from stdout and its output teed to a log.

diagnosis.py and gpu_validation.py both start workloads this way; one class keeps their
stop (the spawned ranks go with the leader) and event handling the same."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

from testkit.harness import stop_process


def _records(line: str) -> list[dict[str, Any]]:
    """The protocol records in one line of output: usually one, several when processes that
    share the stdout wrote without a newline between them; anything else is skipped."""
    decoder, out, pos = json.JSONDecoder(), [], line.find("{")
    while pos >= 0:
        try:
            rec, end = decoder.raw_decode(line, pos)
        except ValueError:
            pos = line.find("{", pos + 1)
            continue
        if isinstance(rec, dict) and "event" in rec:
            out.append(rec)
        pos = line.find("{", end)
    return out


class WorkloadProcess:
    def __init__(self, name: str, cmd: list[str], cwd: Path, env: dict[str, str],
                 log: IO[str], lock: threading.Lock) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self.log, self.lock = log, lock
        with lock:
            log.write(f"# --- workload {name}: {shlex.join(cmd)}\n")
            log.flush()
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=log,
                                     text=True, env=env, start_new_session=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.lock:
                self.log.write(f"[{self.name}] {line}")
                self.log.flush()
            for rec in _records(line):
                self.events.append(rec)
                if rec["event"] in ("ready", "error"):
                    self.ready.set()
        self.ready.set()

    def event(self, name: str) -> dict[str, Any] | None:
        """The latest event called ``name``, if any."""
        return next((e for e in reversed(self.events) if e.get("event") == name), None)

    def wait_ready(self, timeout: float) -> bool:
        """True once the workload said ``ready``; False on ``error``, exit or ``timeout``."""
        self.ready.wait(timeout)
        return self.event("ready") is not None

    def stop(self) -> int | None:
        code, killed = stop_process(self.proc, timeout=30)
        if killed:  # take the spawned ranks / children with it
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.thread.join(timeout=5)
        return code
