from __future__ import annotations

import pytest

from exporter.sources.kubernetes.device_ids import DeviceIndex, resource_matcher
from tests.kubernetes.conftest import INVENTORY, MIG_UUIDS, UUIDS

CASES = [
    (UUIDS[0], "0"),
    (UUIDS[1].lower(), "1"),
    (UUIDS[1].upper().replace("GPU-", "GPU-"), "1"),
    (f"{UUIDS[2]}::0", "2"),
    (f"{UUIDS[2]}::17", "2"),
    (MIG_UUIDS[0], "4-1"),
    (f"{MIG_UUIDS[1]}::2", "4-2"),
    (f"MIG-{UUIDS[4]}/2/0", "4-2"),  # drivers before R470
    ("3", "3"),  # DEVICE_ID_STRATEGY=index
    ("nvidia1", "1"),  # GKE
    ("nvidia4/gi1", "4-1"),
    ("nvidia0/vgpu3", "0"),
    ("9", None),
    ("nvidia9", None),
    ("GPU-elsewhere", None),
    (f"MIG-{UUIDS[4]}/7/0", None),
]


@pytest.mark.parametrize(("device_id", "gpu"), CASES)
def test_device_id_matching(device_id: str, gpu: str | None) -> None:
    assert DeviceIndex(INVENTORY).gpu_for(device_id) == gpu


def test_index_strategy_never_matches_a_mig_label() -> None:
    assert DeviceIndex(INVENTORY).gpu_for("4-1") is None


def test_resource_names() -> None:
    wanted = resource_matcher(["example.com/gpu-*"])
    assert wanted("nvidia.com/gpu") and wanted("nvidia.com/gpu.shared")
    assert wanted("nvidia.com/mig-1g.10gb") and wanted("example.com/gpu-h100")
    assert not wanted("nvidia.com/gpux") and not wanted("cpu") and not wanted("example.com/nic")
