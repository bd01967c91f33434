"""The kubelet source against a real gRPC server on a unix socket."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
import pytest

from exporter.config import KubernetesConfig
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.kubernetes.kubelet import KubeletSource
from exporter.sources.kubernetes.status import ATTRIBUTION_AVAILABLE
from tests.kubernetes.conftest import INVENTORY, MIG_UUIDS, UUIDS
from tests.kubernetes.kubelet_standin import KubeletStandIn, pod

GPU = "nvidia.com/gpu"
REPO = Path(__file__).parents[2]


def store_with_inventory() -> SnapshotStore:
    store = SnapshotStore("node-a", ready_sources=["nvml"])
    store.publish(SourceResult(source="nvml", inventory=INVENTORY))
    return store


def source(path: str, store: SnapshotStore, **overrides: object) -> KubeletSource:
    config = KubernetesConfig.model_validate({"enabled": True, "kubelet_socket": path, **overrides})
    return KubeletSource(config, store)


def labels_of(result: SourceResult, gpu: str) -> dict[str, str]:
    return dict((result.device_labels or {}).get(gpu, ()))


def status(result: SourceResult) -> tuple[float, str]:
    [sample] = [s for s in result.node if s.name == ATTRIBUTION_AVAILABLE]
    lbl = dict(sample.labels)
    assert lbl["source"] == "kubelet"
    return sample.value, lbl["reason"]


async def test_plain_gpus_mig_and_time_slicing(kubelet: tuple[KubeletStandIn, str]) -> None:
    standin, path = kubelet
    standin.pods = [
        pod("ml", "trainer-0", {"main": [(GPU, [UUIDS[0], UUIDS[1]])], "sidecar": []}),
        pod("ml", "web", {"app": [("cpu-only.example/none", ["x"])]}),
        pod("infer", "decode-a", {"server": [("nvidia.com/gpu.shared", [f"{UUIDS[2]}::0"])]}),
        pod("infer", "decode-b", {"server": [("nvidia.com/gpu.shared", [f"{UUIDS[2]}::3"])]}),
        pod("research", "nb", {"lab": [("nvidia.com/mig-3g.40gb", [MIG_UUIDS[1]])]}),
    ]
    result = await source(path, store_with_inventory()).poll()
    assert result.ok and status(result) == (1.0, "")
    assert labels_of(result, "0") == {"namespace": "ml", "pod": "trainer-0", "container": "main"}
    assert labels_of(result, "1") == labels_of(result, "0")
    # time-sliced: one series, holders listed position by position
    assert labels_of(result, "2") == {
        "namespace": "infer,infer",
        "pod": "decode-a,decode-b",
        "container": "server,server",
    }
    assert labels_of(result, "4-2") == {"namespace": "research", "pod": "nb", "container": "lab"}
    assert labels_of(result, "3") == {} and labels_of(result, "4-1") == {}
    assert result.extra["pod_devices"] == {
        ("infer", "decode-a"): ("2",),
        ("infer", "decode-b"): ("2",),
        ("ml", "trainer-0"): ("0", "1"),
        ("research", "nb"): ("4-2",),
    }
    assert not result.errors


async def test_configured_label_names_and_extra_resources(
    kubelet: tuple[KubeletStandIn, str],
) -> None:
    standin, path = kubelet
    standin.pods = [pod("ml", "p", {"c": [("example.com/h100", [UUIDS[3].lower()])]})]
    src = source(
        path,
        store_with_inventory(),
        resource_names=["example.com/*"],
        namespace_label="k8s_namespace",
        pod_label="k8s_pod",
        container_label="k8s_container",
    )
    result = await src.poll()
    assert labels_of(result, "3") == {"k8s_namespace": "ml", "k8s_pod": "p", "k8s_container": "c"}


async def test_a_pod_that_goes_away_loses_its_labels(kubelet: tuple[KubeletStandIn, str]) -> None:
    standin, path = kubelet
    src = source(path, store_with_inventory())
    standin.pods = [
        pod("ml", "a", {"c": [(GPU, [UUIDS[0]])]}),
        pod("ml", "b", {"c": [(GPU, [UUIDS[1]])]}),
    ]
    first = await src.poll()
    assert labels_of(first, "0")["pod"] == "a"
    standin.pods = standin.pods[1:]
    second = await src.poll()
    assert labels_of(second, "0") == {} and labels_of(second, "1")["pod"] == "b"
    assert ("ml", "a") not in second.extra["pod_devices"]


async def test_unknown_device_ids_are_counted_not_fatal(
    kubelet: tuple[KubeletStandIn, str],
) -> None:
    standin, path = kubelet
    standin.pods = [pod("ml", "a", {"c": [(GPU, ["GPU-not-on-this-node", UUIDS[0]])]})]
    result = await source(path, store_with_inventory()).poll()
    assert result.ok and result.errors == {"unmatched_device": 1}
    assert labels_of(result, "0")["pod"] == "a"


async def test_slow_server_times_out_and_keeps_last_mapping(
    kubelet: tuple[KubeletStandIn, str],
) -> None:
    standin, path = kubelet
    standin.pods = [pod("ml", "a", {"c": [(GPU, [UUIDS[0]])]})]
    src = source(path, store_with_inventory(), timeout=0.2)
    assert (await src.poll()).ok
    standin.delay = 2.0
    result = await src.poll()
    assert not result.ok and result.reason == "timeout" and status(result) == (0.0, "timeout")
    # within stale_after the last mapping stays, so labels do not flap on a kubelet hiccup
    assert labels_of(result, "0")["pod"] == "a"


async def test_erroring_server_reports_error_and_drops_stale_mapping(
    kubelet: tuple[KubeletStandIn, str],
) -> None:
    standin, path = kubelet
    standin.pods = [pod("ml", "a", {"c": [(GPU, [UUIDS[0]])]})]
    src = source(path, store_with_inventory(), stale_after=0)
    assert (await src.poll()).ok
    standin.fail = grpc.StatusCode.INTERNAL
    result = await src.poll()
    assert status(result) == (0.0, "error") and "INTERNAL" in result.error
    assert labels_of(result, "0") == {} and result.extra["pod_devices"] == {}
    standin.fail = grpc.StatusCode.RESOURCE_EXHAUSTED
    assert status(await src.poll()) == (0.0, "rate_limited")
    standin.fail = None
    assert status(await src.poll()) == (1.0, "")


async def test_missing_socket(tmp_path: Path) -> None:
    result = await source(str(tmp_path / "nope.sock"), store_with_inventory()).poll()
    assert not result.ok and status(result) == (0.0, "socket_missing")
    assert "nope.sock" in result.error and result.device_labels == {}


async def test_stale_socket_nobody_listens(tmp_path_factory: pytest.TempPathFactory) -> None:
    import socket

    path = str(tmp_path_factory.mktemp("st") / "k.sock")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)
    sock.close()  # the file stays, nothing accepts: a crashed kubelet
    result = await source(path, store_with_inventory(), timeout=2).poll()
    assert status(result) == (0.0, "unavailable")


_AS_NOBODY = textwrap.dedent("""
    import asyncio, sys
    from exporter.config import KubernetesConfig
    from exporter.snapshot import SnapshotStore
    from exporter.sources.kubernetes.kubelet import KubeletSource
    cfg = KubernetesConfig(enabled=True, kubelet_socket=sys.argv[1])
    src = KubeletSource(cfg, SnapshotStore("n"))
    import os, grpc.aio  # everything loaded while still root (the venv lives under /root)
    os.setgid(65534); os.setuid(65534)
    result = asyncio.run(src.poll())
    print(result.reason)
""")


async def test_permission_denied(kubelet: tuple[KubeletStandIn, str]) -> None:
    _, path = kubelet
    os.chmod(path, 0o600)
    if os.geteuid() != 0:
        result = await source(path, store_with_inventory()).poll()
        assert status(result) == (0.0, "permission_denied")
        return
    # root opens any socket: ask from a process that drops to nobody first
    for directory in (os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
        os.chmod(directory, 0o755)
    out = subprocess.run(
        [sys.executable, "-c", _AS_NOBODY, path],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.stdout.strip() == "permission_denied", out.stderr
