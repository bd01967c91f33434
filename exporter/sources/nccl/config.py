"""The NCCL section (``nccl:``), next to the source that reads it."""

from __future__ import annotations

from pydantic import Field, field_validator

from exporter.settings.section import MAX_INTERVAL, Section

DEFAULT_ADDRESS = "localhost:28028"
"""Where NCCL 2.24+ opens its RAS client port in every process (``NCCL_RAS_ADDR``)."""


class NcclConfig(Section):
    """NCCL's RAS endpoints: collectives launched per GPU; see docs/jobs.md."""

    addresses: list[str] = Field(default_factory=lambda: [DEFAULT_ADDRESS], max_length=16)
    """host:port of an NCCL RAS client port (repeatable). Every NCCL process on a host
    listens on the same port; each connection reaches one of them, which answers for its
    whole job."""
    interval: float = Field(10.0, gt=0, le=MAX_INTERVAL)
    """Seconds between questions. Each is a gather over the job's RAS network (every node
    of a multi-node job answers), so keep it slow on large jobs; the counts are cumulative,
    so rates stay exact whatever the interval."""
    timeout: float = Field(3.0, gt=0, le=60)
    """Seconds one connection's whole exchange may take (a hung rank makes RAS wait)."""
    connections: int = Field(3, ge=1, le=16)
    """Connections per address per poll: jobs side by side each listen on the port, and
    the kernel hands each connection to one of them at random."""
    max_body_bytes: int = Field(8 << 20, ge=4096, le=256 << 20)
    """Largest answer read (a job's every rank is in it, about 400 bytes each)."""
    max_communicators: int = Field(1024, ge=1, le=100_000)
    """Communicators with a rank here tracked at once; more are dropped and counted."""
    forget_after: float = Field(120.0, gt=0, le=MAX_INTERVAL)
    """Seconds a communicator not seen again is kept (its last rate too): a poll can miss
    a job whose listener the kernel did not pick."""
    pods: bool = True
    """Also ask each pod holding GPUs at its IP and ``pod_port`` (the IPs come from the API
    server: needs kubernetes.pod_labels). A pod's RAS port is on its own localhost unless
    its job sets ``NCCL_RAS_ADDR=0.0.0.0:28028``; a pod that does not answers nothing."""
    pod_port: int = Field(28028, ge=1, le=65535)
    """The RAS port of the pods asked at their IP."""
    proc_root: str = "/proc"
    """The host's /proc, to match ranks in containers (their own PIDs) to GPU processes."""

    @field_validator("addresses")
    @classmethod
    def _host_port(cls, value: list[str]) -> list[str]:
        for address in value:
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"nccl address {address[:64]!a} is not host:port")
        return value
