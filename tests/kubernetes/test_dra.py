"""DRA attribution: the kubelet stand-in (real gRPC on a unix socket) lists devices that
NVIDIA's DRA driver allocated under ContainerResources.dynamic_resources, named the way the
driver names them (gpu-<minor>, gpu-<minor>-mig-..., CDI ids k8s.gpu.nvidia.com/device=...)."""

from __future__ import annotations

from exporter.readings import PodAssignments
from exporter.sources.kubernetes.config import KubernetesConfig
from exporter.sources.kubernetes.device_ids import DeviceIndex
from exporter.sources.kubernetes.kubelet import KubeletSource
from testkit.kubelet import KubeletStandIn, pod
from tests.kubernetes.conftest import INVENTORY, MIG_UUIDS, UUIDS

DRIVER = "gpu.nvidia.com"
CDI = "k8s.gpu.nvidia.com/device="


def source(path: str, **overrides: object) -> KubeletSource:
    config = KubernetesConfig.model_validate({"enabled": True, "kubelet_socket": path, **overrides})
    return KubeletSource(config, inventory=lambda: INVENTORY)


def entries(pods: PodAssignments | None) -> set[tuple[str, str, str, str, tuple[str, ...]]]:
    assert pods is not None
    return {(c.namespace, c.pod, c.container, c.resource, c.gpus) for c in pods.containers}


async def test_dra_whole_gpus_uuid_cdi_and_shared_claims(
    kubelet: tuple[KubeletStandIn, str],
) -> None:
    standin, path = kubelet
    standin.pods = [
        # two GPUs of one claim, named by canonical name
        pod(
            "ml",
            "train-0",
            {},
            {
                "main": [
                    (
                        "gpus",
                        [
                            (DRIVER, "node-a", "gpu-0", [f"{CDI}gpu-0"], ""),
                            (
                                DRIVER,
                                "node-a",
                                "gpu-1",
                                [f"{CDI}gpu-1", "k8s.gpu.nvidia.com/claim=uid-gpu-1"],
                                "",
                            ),
                        ],
                    )
                ]
            },
        ),
        # a CDI id that is the GPU's UUID wins over the name
        pod(
            "ml",
            "uuid-named",
            {},
            {
                "main": [
                    (
                        "one",
                        [
                            (DRIVER, "node-a", "whatever", [f"{CDI}{UUIDS[2]}"], ""),
                        ],
                    )
                ]
            },
        ),
        # one GPU shared by two pods (the same device in two allocations, share ids)
        pod("infer", "a", {}, {"srv": [("shared", [(DRIVER, "node-a", "gpu-3", [], "s1")])]}),
        pod("infer", "b", {}, {"srv": [("shared", [(DRIVER, "node-a", "gpu-3", [], "s2")])]}),
        # MIG: GPU 4 has two MIG instances, so its canonical name alone is ambiguous; the
        # UUID in the CDI id is not
        pod(
            "ml",
            "mig",
            {},
            {
                "main": [
                    (
                        "slice",
                        [
                            (DRIVER, "node-a", "gpu-4-mig-9-4-4", [f"{CDI}{MIG_UUIDS[1]}"], ""),
                        ],
                    )
                ]
            },
        ),
        # not a GPU driver: ignored; a device plugin GPU next to a claim: both
        pod(
            "net",
            "nic",
            {"c": [("nvidia.com/gpu", [UUIDS[3]])]},
            {"c": [("nic", [("dra.net", "node-a", "eth1", [], "")])]},
        ),
    ]
    src = source(path)
    result = await src.poll()
    await src.close()
    assert result.ok and result.errors == {}
    assert entries(result.reading) == {
        ("ml", "train-0", "main", DRIVER, ("0", "1")),
        ("ml", "uuid-named", "main", DRIVER, ("2",)),
        ("infer", "a", "srv", DRIVER, ("3",)),
        ("infer", "b", "srv", DRIVER, ("3",)),
        ("ml", "mig", "main", DRIVER, ("4-2",)),
        ("net", "nic", "c", "nvidia.com/gpu", ("3",)),
    }
    assert result.reading is not None
    assert result.reading.holders("3") == (
        ("infer", "a", "srv"),
        ("infer", "b", "srv"),
        ("net", "nic", "c"),
    )


async def test_unknown_dra_devices_are_counted(kubelet: tuple[KubeletStandIn, str]) -> None:
    standin, path = kubelet
    standin.pods = [
        pod(
            "ml",
            "p",
            {},
            {
                "main": [
                    (
                        "c",
                        [
                            (DRIVER, "node-a", "gpu-7", [], ""),
                            (
                                DRIVER,
                                "node-a",
                                "gpu-4-mig-9-0-4",
                                [],
                                "",
                            ),  # two MIG instances on GPU 4
                            ("example.com/gpu", "pool", "x", [], ""),
                        ],
                    )
                ]
            },
        )
    ]
    result = await source(path).poll()
    assert result.errors == {"unmatched_device": 2}
    assert entries(result.reading) == {("ml", "p", "main", DRIVER, ())}
    extra = await source(path, dra_drivers=["example.com/*"]).poll()
    assert ("ml", "p", "main", "example.com/gpu", ()) in entries(extra.reading)


def test_dra_names() -> None:
    index = DeviceIndex(INVENTORY)
    assert index.gpu_for_dra("gpu-2") == "2"
    assert index.gpu_for_dra("GPU-2 ") == "2"
    assert index.gpu_for_dra("gpu-4") == "4"
    assert index.gpu_for_dra("gpu-9") is None
    assert index.gpu_for_dra("gpu-4-mig-9-0-4") is None  # two instances: ambiguous
    assert index.gpu_for_dra("x", [f"{CDI}{MIG_UUIDS[0].lower()}"]) == "4-1"
    single = DeviceIndex(INVENTORY[:6])  # GPU 4 with one MIG instance, 4-1
    assert single.gpu_for_dra("gpu-4-mig-3g40gb-9-4") == "4-1"
