"""A small async client of the kubelet's pod-resources API over its unix socket.

Failures become :class:`KubeletError` with a short reason code (``socket_missing``,
``permission_denied``, ``unavailable``, ``timeout``, ``rate_limited``, ``error``) so the
source can publish why attribution is off without parsing gRPC errors itself.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import grpc

from exporter.sources.kubernetes import podresources_pb2 as pb
from exporter.sources.kubernetes import podresources_pb2_grpc as pb_grpc

# Nodes with many pods and pinned CPUs answer List with more than gRPC's 4 MiB default.
_MAX_MESSAGE = 32 * 1024 * 1024

T = TypeVar("T")


class KubeletError(Exception):
    """A failed call; ``reason`` is the code published on goodput_attribution_available."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def check_socket(path: str) -> None:
    """Raise :class:`KubeletError` if ``path`` is not a unix socket this process may open.

    gRPC would only say "failed to connect"; checking first gives the operator the cause.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise KubeletError("socket_missing", f"kubelet socket {path} does not exist") from None
    except PermissionError:
        raise KubeletError(
            "permission_denied", f"kubelet socket {path}: permission denied"
        ) from None
    except OSError as exc:
        raise KubeletError("error", f"kubelet socket {path}: {exc.strerror or exc}") from None
    if not stat.S_ISSOCK(mode):
        raise KubeletError("error", f"kubelet socket {path} is not a socket")
    if not os.access(path, os.R_OK | os.W_OK):
        raise KubeletError("permission_denied", f"kubelet socket {path}: permission denied")


def _from_rpc_error(path: str, exc: grpc.RpcError) -> KubeletError:
    code = exc.code() if hasattr(exc, "code") else None
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    where = f"kubelet socket {path}"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return KubeletError("timeout", f"{where}: no answer within the timeout")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return KubeletError("rate_limited", f"{where}: {details}")
    if code == grpc.StatusCode.UNAVAILABLE:
        lowered = details.lower()
        if "permission denied" in lowered:
            return KubeletError("permission_denied", f"{where}: permission denied")
        if "no such file" in lowered:
            return KubeletError("socket_missing", f"{where} does not exist")
        return KubeletError("unavailable", f"{where}: {details}")
    name = code.name if code is not None else "UNKNOWN"
    return KubeletError("error", f"{where}: {name}: {details}")


class _Lister(Protocol):
    """The two calls of the generated stub, typed (the generated module is not)."""

    def List(
        self, request: pb.ListPodResourcesRequest, *, timeout: float
    ) -> Awaitable[pb.ListPodResourcesResponse]: ...

    def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, *, timeout: float
    ) -> Awaitable[pb.AllocatableResourcesResponse]: ...


_new_stub: Callable[[object], _Lister] = pb_grpc.PodResourcesListerStub


class PodResourcesClient:
    """One channel per client; it is dropped after a failure so the next call reconnects
    at once instead of waiting out gRPC's reconnect backoff (a kubelet restart)."""

    def __init__(self, socket_path: str, timeout: float) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._stub: _Lister | None = None

    def _lister(self) -> _Lister:
        """The stub on an open channel, after checking the socket (gRPC would only say
        "failed to connect")."""
        check_socket(self.socket_path)
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(
                f"unix://{os.path.abspath(self.socket_path)}",
                options=[("grpc.max_receive_message_length", _MAX_MESSAGE)],
            )
            self._stub = _new_stub(self._channel)
        return self._stub

    async def list(self) -> pb.ListPodResourcesResponse:
        return await self._guard(
            lambda s: s.List(pb.ListPodResourcesRequest(), timeout=self.timeout)
        )

    async def allocatable(self) -> pb.AllocatableResourcesResponse:
        return await self._guard(
            lambda s: s.GetAllocatableResources(
                pb.AllocatableResourcesRequest(), timeout=self.timeout
            )
        )

    async def _guard(self, call: Callable[[_Lister], Awaitable[T]]) -> T:
        try:
            return await call(self._lister())
        except grpc.RpcError as exc:
            await self.close()
            raise _from_rpc_error(self.socket_path, exc) from None

    async def close(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()
