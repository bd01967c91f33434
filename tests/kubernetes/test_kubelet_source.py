"""The kubelet source against a real gRPC server on a unix socket."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from structlog.testing import capture_logs

from exporter.readings import Device
from exporter.snapshot import SourceResult
from exporter.sources.kubernetes.config import KubernetesConfig
from exporter.sources.kubernetes.kubelet import KubeletSource
from testkit.kubelet import KubeletStandIn, pod
from tests.kubernetes.conftest import INVENTORY, MIG_UUIDS, UUIDS

GPU = "nvidia.com/gpu"
REPO = Path(__file__).parents[2]


def source(
    path: str, inventory: tuple[Device, ...] = INVENTORY, **overrides: object
) -> KubeletSource:
    config = KubernetesConfig.model_validate({"enabled": True, "kubelet_socket": path, **overrides})
    return KubeletSource(config, inventory=lambda: inventory)


def holders(result: SourceResult, gpu: str) -> tuple[tuple[str, str, str], ...]:
    assert result.reading is not None
    return result.reading.holders(gpu)


def status(result: SourceResult) -> str:
    """The kubelet's availability reason ("" when attribution works)."""
    [available] = result.availability
    assert available.source == "kubelet"
    return available.reason


async def test_plain_gpus_mig_and_time_slicing(kubelet: tuple[KubeletStandIn, str]) -> None:
    standin, path = kubelet
    standin.pods = [
        pod("ml", "trainer-0", {"main": [(GPU, [UUIDS[0], UUIDS[1]])], "sidecar": []}),
        pod("ml", "web", {"app": [("cpu-only.example/none", ["x"])]}),
        pod("infer", "decode-a", {"server": [("nvidia.com/gpu.shared", [f"{UUIDS[2]}::0"])]}),
        pod("infer", "decode-b", {"server": [("nvidia.com/gpu.shared", [f"{UUIDS[2]}::3"])]}),
        pod("research", "nb", {"lab": [("nvidia.com/mig-3g.40gb", [MIG_UUIDS[1]])]}),
    ]
    result = await source(path).poll()
    assert result.ok and status(result) == ""
    assert holders(result, "0") == (("ml", "trainer-0", "main"),)
    assert holders(result, "1") == holders(result, "0")
    # time-sliced: each replica's pod holds the GPU
    assert holders(result, "2") == (
        ("infer", "decode-a", "server"),
        ("infer", "decode-b", "server"),
    )
    assert holders(result, "4-2") == (("research", "nb", "lab"),)
    assert holders(result, "3") == () and holders(result, "4-1") == ()
    assert result.reading is not None
    assert result.reading.pod_gpus() == {
        ("infer", "decode-a"): ("2",),
        ("infer", "decode-b"): ("2",),
        ("ml", "trainer-0"): ("0", "1"),
        ("research", "nb"): ("4-2",),
    }
    [trainer] = [c for c in result.reading.containers if c.pod == "trainer-0"]
    assert trainer.resource == GPU and trainer.device_ids == (UUIDS[0], UUIDS[1])
    assert not result.errors


async def test_every_mig_device_id_form(kubelet: tuple[KubeletStandIn, str]) -> None:
    """MIG UUIDs, pre-R470 ``MIG-GPU-<uuid>/<gi>/<ci>`` ids and GKE's ``nvidia<i>/gi<g>``
    all name the same ``<parent>-<gi>`` instance."""
    standin, path = kubelet
    standin.pods = [
        pod("a", "uuid", {"c": [("nvidia.com/mig-3g.40gb", [MIG_UUIDS[0]])]}),
        pod("a", "legacy", {"c": [("nvidia.com/mig-3g.40gb", [f"MIG-{UUIDS[4]}/2/0"])]}),
        pod("a", "gke", {"c": [(GPU, ["nvidia4/gi1"])]}),
    ]
    result = await source(path).poll()
    assert holders(result, "4-1") == (("a", "gke", "c"), ("a", "uuid", "c"))
    assert holders(result, "4-2") == (("a", "legacy", "c"),)
    assert not result.errors


async def test_extra_resource_names(kubelet: tuple[KubeletStandIn, str]) -> None:
    standin, path = kubelet
    standin.pods = [pod("ml", "p", {"c": [("example.com/h100", [UUIDS[3].lower()])]})]
    assert holders(await source(path).poll(), "3") == ()
    result = await source(path, resource_names=["example.com/*"]).poll()
    assert holders(result, "3") == (("ml", "p", "c"),)


async def test_a_pod_that_goes_away_loses_its_gpus(kubelet: tuple[KubeletStandIn, str]) -> None:
    standin, path = kubelet
    src = source(path)
    standin.pods = [
        pod("ml", "a", {"c": [(GPU, [UUIDS[0]])]}),
        pod("ml", "b", {"c": [(GPU, [UUIDS[1]])]}),
    ]
    first = await src.poll()
    assert holders(first, "0") == (("ml", "a", "c"),)
    standin.pods = standin.pods[1:]
    second = await src.poll()
    assert holders(second, "0") == () and holders(second, "1") == (("ml", "b", "c"),)
    assert second.reading is not None and ("ml", "a") not in second.reading.pod_gpus()


async def test_inventory_is_read_at_every_poll(kubelet: tuple[KubeletStandIn, str]) -> None:
    """Before the GPU source's first poll nothing can match, and that is not an error."""
    standin, path = kubelet
    standin.pods = [pod("ml", "a", {"c": [(GPU, [UUIDS[0]])]})]
    inventory: list[tuple[Device, ...]] = [()]
    config = KubernetesConfig(enabled=True, kubelet_socket=path)
    src = KubeletSource(config, inventory=lambda: inventory[0])
    early = await src.poll()
    assert early.ok and not early.errors and holders(early, "0") == ()
    inventory[0] = INVENTORY
    assert holders(await src.poll(), "0") == (("ml", "a", "c"),)


async def test_unknown_device_ids_are_counted_and_logged_once(
    kubelet: tuple[KubeletStandIn, str],
) -> None:
    standin, path = kubelet
    standin.pods = [pod("ml", "a", {"c": [(GPU, ["GPU-not-on-this-node", UUIDS[0]])]})]
    src = source(path)
    with capture_logs() as logs:
        results = [await src.poll() for _ in range(3)]
    for result in results:
        assert result.ok and result.errors == {"unmatched_device": 1}
        assert holders(result, "0") == (("ml", "a", "c"),)
    unmatched = [e for e in logs if e["event"] == "kubelet_device_unmatched"]
    assert len(unmatched) == 1 and unmatched[0]["state"] == ("GPU-not-on-this-node",)


async def test_slow_server_times_out_and_keeps_last_mapping(
    kubelet: tuple[KubeletStandIn, str],
) -> None:
    standin, path = kubelet
    standin.pods = [pod("ml", "a", {"c": [(GPU, [UUIDS[0]])]})]
    src = source(path, timeout=0.2)
    assert (await src.poll()).ok
    standin.delay = 5.0
    started = time.monotonic()
    result = await src.poll()
    assert time.monotonic() - started < 2.0  # the timeout bounds the poll
    assert not result.ok and result.reason == "timeout" and status(result) == "timeout"
    # within stale_after the last mapping stays, so series do not flap on a kubelet hiccup
    assert holders(result, "0") == (("ml", "a", "c"),)


async def test_erroring_server_reports_error_and_drops_stale_mapping(
    kubelet: tuple[KubeletStandIn, str],
) -> None:
    standin, path = kubelet
    standin.pods = [pod("ml", "a", {"c": [(GPU, [UUIDS[0]])]})]
    src = source(path, stale_after=0)
    assert (await src.poll()).ok
    standin.fail = grpc.StatusCode.INTERNAL
    result = await src.poll()
    assert status(result) == "error" and "INTERNAL" in result.error
    assert holders(result, "0") == ()
    assert result.reading is not None and not result.reading.containers
    standin.fail = grpc.StatusCode.RESOURCE_EXHAUSTED
    assert status(await src.poll()) == "rate_limited"
    standin.fail = None
    recovered = await src.poll()
    assert recovered.ok and status(recovered) == "" and holders(recovered, "0")


async def test_missing_socket(tmp_path: Path) -> None:
    result = await source(str(tmp_path / "nope.sock")).poll()
    assert not result.ok and status(result) == "socket_missing"
    assert "nope.sock" in result.error
    assert result.reading is None  # never answered: no assignments, not "no pods"


async def test_socket_appearing_later_is_picked_up(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A kubelet that starts after the exporter: the next poll connects, no restart."""
    from testkit.kubelet import serve

    path = str(tmp_path_factory.mktemp("late") / "kubelet.sock")
    src = source(path)
    assert status(await src.poll()) == "socket_missing"
    server, standin = await serve(path)
    try:
        standin.pods = [pod("ml", "a", {"c": [(GPU, [UUIDS[0]])]})]
        result = await src.poll()
        assert result.ok and holders(result, "0") == (("ml", "a", "c"),)
    finally:
        await src.close()
        await server.stop(0)


async def test_stale_socket_nobody_listens(tmp_path_factory: pytest.TempPathFactory) -> None:
    import socket

    path = str(tmp_path_factory.mktemp("st") / "k.sock")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)
    sock.close()  # the file stays, nothing accepts: a crashed kubelet
    result = await source(path, timeout=2).poll()
    assert status(result) == "unavailable"


async def test_not_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "kubelet.sock"
    path.write_text("garbage")
    result = await source(str(path)).poll()
    assert status(result) == "error" and "not a socket" in result.error


@pytest.fixture
async def garbage_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[str]:
    """Something on the socket that accepts and answers bytes that are not HTTP/2."""
    path = str(tmp_path_factory.mktemp("gb") / "kubelet.sock")

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n\x00\xff garbage \xff\x00" * 64)
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(talk, path)
    try:
        yield path
    finally:
        server.close()
        await server.wait_closed()


async def test_garbage_on_the_socket(garbage_server: str) -> None:
    src = source(garbage_server, timeout=3)
    started = time.monotonic()
    result = await src.poll()
    assert time.monotonic() - started < 3.0
    assert not result.ok and status(result) in {"unavailable", "error"}, result.error
    assert result.reading is None  # never answered: no assignments, not "no pods"
    await src.close()


_AS_NOBODY = textwrap.dedent("""
    import asyncio, sys
    from exporter.sources.kubernetes.config import KubernetesConfig
    from exporter.sources.kubernetes.kubelet import KubeletSource
    cfg = KubernetesConfig(enabled=True, kubelet_socket=sys.argv[1])
    src = KubeletSource(cfg, inventory=lambda: ())
    import os, grpc.aio  # everything loaded while still root (the venv lives under /root)
    os.setgid(65534); os.setuid(65534)
    result = asyncio.run(src.poll())
    print(result.reason)
""")


async def test_permission_denied(kubelet: tuple[KubeletStandIn, str]) -> None:
    _, path = kubelet
    os.chmod(path, 0o600)
    if os.geteuid() != 0:
        result = await source(path).poll()
        assert status(result) == "permission_denied"
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
