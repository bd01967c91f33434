"""NCCL's RAS client port, faked on loopback for the hardware this machine lacks.

It speaks what NCCL 2.28's RAS thread speaks (``src/ras/client_support.cc``): a line
protocol (``CLIENT PROTOCOL 2`` -> ``SERVER PROTOCOL 2``, ``TIMEOUT n`` -> ``OK``, ``SET FORMAT
json`` -> ``OK``, ``STATUS`` -> the JSON document, then the connection closes), with the same
field names and layout. Like NCCL it binds with ``SO_REUSEPORT``, so two fakes (two jobs) can
share one port and the kernel hands each connection to one of them. ``behaviour`` makes it
misbehave the ways a real endpoint can: hang, answer garbage, be too old for JSON, answer
too much, or speak another protocol.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
"""NCCL's collective functions, in its order (``ncclFuncToString``)."""


@dataclass
class Rank:
    rank: int
    pid: int
    nvml_dev: int
    counts: dict[str, int] = field(default_factory=dict)
    host: str = "10.0.0.1"


def document(comms: Mapping[str, Iterable[Rank]], size: int | None = None) -> dict[str, Any]:
    """A status document as NCCL 2.28 writes it, for communicators hash -> ranks."""
    out = []
    for hash_, ranks in comms.items():
        ranks = list(ranks)
        out.append({
            "hash": hash_, "secondary_hash": "0x1:0x2", "size": size or len(ranks),
            "ranks_count": len(ranks), "missing_ranks_count": 0,
            "ranks": [{
                "rank": r.rank, "host": r.host, "pid": r.pid, "cuda_dev": r.nvml_dev,
                "nvml_dev": r.nvml_dev,
                "status": {"init_state": 0, "async_error": 0, "finalize_called": False,
                           "destroy_flag": False, "abort_flag": False},
                "collective_counts": {f: r.counts.get(f, 0) for f in FUNCTIONS},
            } for r in ranks],
            "missing_ranks": [],
        })
    return {"nccl_version": "2.28.9", "cuda_runtime_version": 13000,
            "cuda_driver_version": 13000, "timestamp": "2026-11-28 23:00:00",
            "communicators_count": len(out), "communicators": out,
            "ras": {"collection_time_sec": 0.001, "timeouts_count": 0}}


class FakeRas:
    """One process's RAS port. ``doc`` is read at each STATUS (change it between polls)."""

    def __init__(self, doc: dict[str, Any] | None = None, *, port: int = 0,
                 behaviour: str = "ok", huge_bytes: int = 0,
                 host: str = "127.0.0.1") -> None:
        self.doc = doc or document({})
        self.port = port
        self.behaviour = behaviour
        self.huge_bytes = huge_bytes
        self.host = host
        self.statuses = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeRas:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._client, sock=sock)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := (await reader.readline()).decode().strip():
                verb = line.upper()
                if self.behaviour == "other" and verb.startswith("CLIENT PROTOCOL"):
                    writer.write(b"HELLO\n")
                elif verb.startswith("CLIENT PROTOCOL"):
                    writer.write(b"SERVER PROTOCOL 2\n")
                elif verb.startswith("TIMEOUT"):
                    writer.write(b"OK\n")
                elif verb.startswith("SET FORMAT"):
                    ok = self.behaviour != "old" and verb.endswith(("JSON", "TEXT"))
                    writer.write(b"OK\n" if ok else b"ERROR: Unknown command " +
                                 line.encode() + b"\n")
                elif verb == "STATUS":
                    self.statuses += 1
                    await self._status(writer)
                    return
                await writer.drain()
        finally:
            writer.close()

    async def _status(self, writer: asyncio.StreamWriter) -> None:
        if self.behaviour == "hang":
            await asyncio.sleep(3600)
        if self.behaviour == "garbage":
            writer.write(b"Communicators... (0.00s)\n[not json")
        elif self.behaviour == "huge":
            writer.write(b" " * self.huge_bytes + json.dumps(self.doc).encode())
        else:
            writer.write(json.dumps(self.doc, indent=2).encode())
        await writer.drain()
