"""NCCL's RAS client protocol (NCCL 2.28+, protocol 2): one status in JSON per connection.

The exchange is line based: ``CLIENT PROTOCOL 2`` is answered ``SERVER PROTOCOL <n>``,
``TIMEOUT <s>`` and ``SET FORMAT json`` each ``OK`` (an older NCCL answers ``ERROR: ...`` to
the format: it has only the text report), and ``STATUS`` with the document, after which
NCCL closes the connection. The document lists every communicator of the answering
process's job with each rank's host, PID, devices and ``collective_counts`` (NCCL's
``seqNumber`` per collective function, bumped as each collective is launched; send and
receive are not counted).
"""

from __future__ import annotations

import asyncio
import contextlib

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PROTOCOL = 2
LEG_TIMEOUT_SECONDS = 1
"""How long RAS waits for an unresponsive peer before answering without it."""
MAX_RANKS = 1 << 17
MAX_COMMUNICATORS = 1 << 16


class RasError(Exception):
    """One connection's failure; ``reason`` is the metric's short code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class RasRank(_Lenient):
    rank: int = Field(ge=0)
    host: str = Field("", max_length=256)
    pid: int
    cuda_dev: int = -1
    nvml_dev: int = -1
    collective_counts: dict[str, int] = Field(default_factory=dict, max_length=32)

    @property
    def collectives(self) -> int:
        """Every collective function's count together."""
        return sum(max(v, 0) for v in self.collective_counts.values())


class RasCommunicator(_Lenient):
    hash: str = Field(max_length=64)
    size: int = Field(0, ge=0)
    ranks: list[RasRank] = Field(default_factory=list, max_length=MAX_RANKS)


class RasStatus(_Lenient):
    nccl_version: str = Field("", max_length=64)
    communicators: list[RasCommunicator] = Field(
        default_factory=list, max_length=MAX_COMMUNICATORS)


def parse(body: bytes) -> RasStatus:
    """The status document, or RasError("bad_answer") naming what is wrong with it."""
    try:
        return RasStatus.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))[:80]
        raise RasError("bad_answer", f"not an NCCL RAS status: {where}: {first['msg']}"[:200]
                       ) from None


async def _line(reader: asyncio.StreamReader, expect: str, what: str) -> str:
    try:
        raw = await reader.readline()
    except ValueError:  # a line over the stream's limit
        raise RasError("bad_answer", f"{what}: answer line too long") from None
    line = raw.decode("utf-8", "replace").strip()
    if not raw:
        raise RasError("closed", f"{what}: connection closed")
    if not line.upper().startswith(expect):
        if line.upper().startswith("ERROR") and what == "set format":
            raise RasError("no_json", "NCCL older than 2.28 (no JSON status)")
        raise RasError("bad_answer", f"{what}: unexpected answer {line[:60]!a}")
    return line


async def _exchange(host: str, port: int, max_body_bytes: int) -> bytes:
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        raise RasError("refused", f"nothing listens on {host}:{port}") from None
    except OSError as exc:
        raise RasError("unreachable", f"{host}:{port}: {exc.strerror or exc}") from None
    try:
        writer.write(f"CLIENT PROTOCOL {PROTOCOL}\n".encode())
        await _line(reader, "SERVER PROTOCOL", "handshake")
        writer.write(f"TIMEOUT {LEG_TIMEOUT_SECONDS}\n".encode())
        await _line(reader, "OK", "timeout")
        writer.write(b"SET FORMAT json\n")
        await _line(reader, "OK", "set format")
        writer.write(b"STATUS\n")
        chunks, size = [], 0
        while chunk := await reader.read(1 << 16):
            size += len(chunk)
            if size > max_body_bytes:
                raise RasError("too_large", f"status over {max_body_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def status(host: str, port: int, timeout: float, max_body_bytes: int) -> RasStatus:
    """Ask one RAS endpoint for its job's status, within ``timeout`` seconds."""
    where = f"{host}:{port}"
    try:
        async with asyncio.timeout(timeout):
            body = await _exchange(host, port, max_body_bytes)
        return parse(body)
    except TimeoutError:
        raise RasError("timeout", f"{where} gave no status in {timeout:g} s") from None
    except RasError as exc:
        if where in str(exc):
            raise
        raise RasError(exc.reason, f"{where}: {exc}") from None
