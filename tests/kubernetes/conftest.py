from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from exporter.snapshot import Device
from testkit.kubelet import KubeletStandIn, serve

# Four whole GPUs and two MIG instances of a fifth, as NVML names them.
UUIDS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(5)]
MIG_UUIDS = [f"MIG-1111111{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(2)]
INVENTORY: tuple[Device, ...] = (
    *(Device(gpu=str(i), uuid=UUIDS[i], name="NVIDIA H100 80GB HBM3") for i in range(5)),
    *(
        Device(
            gpu=f"4-{gi}",
            uuid=MIG_UUIDS[n],
            parent_uuid=UUIDS[4],
            gpu_instance_id=str(gi),
            compute_instance_id="0",
            mig_profile="3g.40gb",
        )
        for n, gi in enumerate((1, 2))
    ),
)


@pytest.fixture
async def kubelet(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[KubeletStandIn, str]]:
    # A short directory: unix socket paths are limited to 107 bytes.
    path = str(tmp_path_factory.mktemp("kl") / "kubelet.sock")
    server, standin = await serve(path)
    try:
        yield standin, path
    finally:
        await server.stop(0)
