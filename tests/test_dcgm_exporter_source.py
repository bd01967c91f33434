"""dcgm-exporter source against a real aiohttp server on loopback, both vocabularies."""
# ruff: noqa: E501  (exposition lines are as long as dcgm-exporter prints them)

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from exporter.readings import NvmlReading
from exporter.snapshot import Device, SnapshotStore, SourceResult
from exporter.sources.profiling.dcgm_exporter import DcgmExporterSource, parse
from exporter.sources.profiling.select import ProfilingSelector
from tests.support.profiling import profiling_available, sample_value
from tests.support.typed import gpus_of

UUID0 = "GPU-0f0e0d0c-aaaa-bbbb-cccc-000000000000"
UUID1 = "GPU-1f1e1d1c-aaaa-bbbb-cccc-111111111111"

# Written for these tests in the shape dcgm-exporter 4.8 prints (old names, %, MiB, MHz).
V48 = f"""# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{{gpu="0",UUID="{UUID0}",pci_bus_id="00000000:07:00.0",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1"}} 1410
DCGM_FI_DEV_SM_CLOCK{{gpu="1",UUID="{UUID1}",pci_bus_id="00000000:0F:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1"}} 1095
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 97
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="{UUID1}",device="nvidia1"}} 0
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 1024
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 5000000
# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 0.990000
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="1",UUID="{UUID1}",device="nvidia1"}} 0.000000
# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned.
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 0.040000
DCGM_FI_PROF_SM_ACTIVE{{gpu="1",UUID="{UUID1}",device="nvidia1"}} 0.000000
# HELP DCGM_FI_PROF_PIPE_TENSOR_ACTIVE Ratio of cycles the tensor (HMMA) pipe is active.
# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 0.010000
# HELP DCGM_FI_PROF_DRAM_ACTIVE Ratio of cycles the device memory interface is active.
# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge
DCGM_FI_PROF_DRAM_ACTIVE{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 0.020000
# HELP DCGM_FI_PROF_PCIE_TX_BYTES The rate of data transmitted over the PCIe bus.
# TYPE DCGM_FI_PROF_PCIE_TX_BYTES gauge
DCGM_FI_PROF_PCIE_TX_BYTES{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 123456
"""

# The same node as dcgm-exporter 4.9 would print it (DCGM 4.6+ names, base units), plus a MIG
# instance of GPU 1.
V49 = f"""# HELP DCGM_FI_DEV_SM_CLOCK_HZ SM clock frequency.
# TYPE DCGM_FI_DEV_SM_CLOCK_HZ gauge
DCGM_FI_DEV_SM_CLOCK_HZ{{gpu="0",UUID="{UUID0}",device="nvidia0",hostname="n1"}} 1410000000
# HELP DCGM_FI_DEV_GPU_UTIL_RATIO GPU utilization.
# TYPE DCGM_FI_DEV_GPU_UTIL_RATIO gauge
DCGM_FI_DEV_GPU_UTIL_RATIO{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 0.97
# HELP DCGM_FI_DEV_FB_USED_BYTES Framebuffer memory used.
# TYPE DCGM_FI_DEV_FB_USED_BYTES gauge
DCGM_FI_DEV_FB_USED_BYTES{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 1073741824
# HELP DCGM_FI_PROF_SM_UTIL_RATIO Ratio of cycles an SM has at least one warp assigned.
# TYPE DCGM_FI_PROF_SM_UTIL_RATIO gauge
DCGM_FI_PROF_SM_UTIL_RATIO{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 0.040000
DCGM_FI_PROF_SM_UTIL_RATIO{{gpu="1",UUID="{UUID1}",device="nvidia1",GPU_I_PROFILE="3g.40gb",GPU_I_ID="2"}} 0.600000
# HELP DCGM_FI_PROF_TENSOR_UTIL_RATIO Ratio of cycles any tensor pipe is active.
# TYPE DCGM_FI_PROF_TENSOR_UTIL_RATIO gauge
DCGM_FI_PROF_TENSOR_UTIL_RATIO{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 0.010000
DCGM_FI_PROF_TENSOR_UTIL_RATIO{{gpu="1",UUID="{UUID1}",device="nvidia1",GPU_I_PROFILE="3g.40gb",GPU_I_ID="2"}} 0.300000
# HELP DCGM_FI_PROF_DRAM_UTIL_RATIO Ratio of cycles the device memory interface is active.
# TYPE DCGM_FI_PROF_DRAM_UTIL_RATIO gauge
DCGM_FI_PROF_DRAM_UTIL_RATIO{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 0.020000
# HELP DCGM_FI_PROF_HMMA_UTIL_RATIO Ratio of cycles the HMMA pipe is active.
# TYPE DCGM_FI_PROF_HMMA_UTIL_RATIO gauge
DCGM_FI_PROF_HMMA_UTIL_RATIO{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 0.005000
# HELP DCGM_FI_PROF_PCIE_TX_BYTES The rate of data transmitted over the PCIe bus.
# TYPE DCGM_FI_PROF_PCIE_TX_BYTES gauge
DCGM_FI_PROF_PCIE_TX_BYTES{{gpu="0",UUID="{UUID0}",device="nvidia0"}} 123456
"""


class Clock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


class Server:
    """A real HTTP server on loopback whose answer tests change between scrapes."""

    def __init__(self) -> None:
        self.body = V48
        self.status = 200
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        return web.Response(text=self.body, status=self.status,
                            content_type="text/plain", charset="utf-8")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server()
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
def store() -> SnapshotStore:
    s = SnapshotStore("n1")
    s.publish(SourceResult(source="nvml", reading=NvmlReading(inventory=(
        Device(gpu="0", uuid=UUID0),
        Device(gpu="1", uuid=UUID1),
        Device(gpu="1-2", uuid="MIG-abcd", parent_uuid=UUID1, gpu_instance_id="2",
               compute_instance_id="0"),
    ))))
    return s


def value(result: SourceResult, gpu: str, name: str, **lbl: str) -> float | None:
    return sample_value(result, gpu, name, **lbl)


def available(result: SourceResult, gpu: str) -> tuple[float, str] | None:
    return profiling_available(result, gpu, "dcgm-exporter")


async def source(store: SnapshotStore, url: str, **kw: Any) -> DcgmExporterSource:
    kw.setdefault("clock", Clock())
    src = DcgmExporterSource(lambda: store.current.inventory, url, interval=5.0, timeout=1.0, **kw)
    await src.start()
    return src


async def test_vocabulary_48(server, store) -> None:
    clock = Clock()
    src = await source(store, server.url, clock=clock)
    try:
        result = await src.poll()
        clock.t += 5
        result = await src.poll()
    finally:
        await src.close()
    assert result.ok
    assert available(result, "0") == (1.0, "")
    assert value(result, "0", "goodput_gpu_sm_active_ratio") == pytest.approx(0.04)
    assert value(result, "0", "goodput_gpu_graphics_active_ratio") == pytest.approx(0.99)
    assert value(result, "0", "goodput_gpu_tensor_active_ratio") == pytest.approx(0.01)
    assert value(result, "0", "goodput_gpu_pcie_bytes_per_second", direction="tx") == 123456
    assert value(result, "0", "goodput_gpu_sm_active_seconds_total") == pytest.approx(0.4)
    assert available(result, "1") == (1.0, "")
    assert available(result, "1-2") == (0.0, "not_found")  # 4.8 page has no MIG rows
    # DEV rows are parsed into base units (they tell not_exported from not_found)
    scrape = parse(V48)
    dev = next(v for k, v in scrape.device.items() if k.startswith("0f0e"))
    assert dev["gpu_utilization_ratio"] == pytest.approx(0.97)
    assert dev["memory_used_bytes"] == 1024 * 1024 * 1024
    assert dev["sm_clock_hertz"] == pytest.approx(1.41e9)
    assert dev["energy_joules"] == pytest.approx(5000.0)
    assert scrape.vocabulary == "4.8"


async def test_vocabulary_49_and_mig_rows(server, store) -> None:
    server.body = V49
    src = await source(store, server.url)
    try:
        result = await src.poll()
    finally:
        await src.close()
    assert value(result, "0", "goodput_gpu_sm_active_ratio") == pytest.approx(0.04)
    assert value(result, "0", "goodput_gpu_tensor_pipe_active_ratio",
                 pipe="hmma") == pytest.approx(0.005)
    assert value(result, "1-2", "goodput_gpu_sm_active_ratio") == pytest.approx(0.6)
    assert available(result, "1") == (0.0, "not_found")
    scrape = parse(V49)
    dev = next(v for k, v in scrape.device.items() if k.startswith("0f0e"))
    assert dev["gpu_util_ratio"] == pytest.approx(0.97)
    assert dev["fb_used_bytes"] == 1073741824
    assert dev["sm_clock_hertz"] == 1.41e9
    assert scrape.vocabulary == "4.9"


def test_both_vocabularies_give_the_same_profiling_values() -> None:
    old, new = parse(V48), parse(V49)
    key = next(iter(k for k in old.profiling if k.startswith("0f0e")))
    for field_id in (1002, 1004, 1005, 1009):
        assert old.profiling[key][field_id] == new.profiling[key][field_id]


async def test_unreachable_then_back(store) -> None:
    srv = Server()
    await srv.start()
    url = srv.url
    await srv.stop()
    src = await source(store, url)
    try:
        with capture_logs() as logs:
            first = await src.poll()
            second = await src.poll()
        assert first.ok and available(first, "0") == (0.0, "unreachable")
        assert available(second, "1") == (0.0, "unreachable")
        assert [e["event"] for e in logs] == ["dcgm_exporter_unavailable"]
        await srv.start()  # same port
        with capture_logs() as logs:
            back = await src.poll()
        assert available(back, "0") == (1.0, "")
        assert "dcgm_exporter_recovered" in [e["event"] for e in logs]
    finally:
        await src.close()
        await srv.stop()


@pytest.mark.parametrize(("status", "body", "reason"), [
    (500, "oops", "bad_response"),
    (200, "this is {not an exposition\n", "bad_response"),
    (200, "x" * 4096, "bad_response"),
])
async def test_bad_answers(server, store, status, body, reason) -> None:
    server.status, server.body = status, body
    src = await source(store, server.url, max_body_bytes=1024, required=True)
    try:
        result = await src.poll()
    finally:
        await src.close()
    assert (result.ok, result.reason) == (False, reason)
    assert server.url in result.error or "exposition" in result.error
    assert available(result, "0") == (0.0, reason)


async def test_gpu_without_profiling_rows_is_not_exported(server, store) -> None:
    server.body = "\n".join(line for line in V48.splitlines()
                            if "PROF" not in line or UUID1 not in line) + "\n"
    src = await source(store, server.url)
    try:
        result = await src.poll()
    finally:
        await src.close()
    assert available(result, "1") == (0.0, "not_exported")
    assert result.errors == {"not_exported": 1, "not_found": 1}


async def test_auto_mode_only_gpus_nobody_else_serves(server, store) -> None:
    selector = ProfilingSelector(("gpm", "dcgm", "dcgm-exporter"))
    src = await source(store, server.url, selector=selector)
    try:
        assert not gpus_of(await src.poll())
        for gpu in ("0", "1", "1-2"):
            selector.report("gpm", gpu, gpu == "0", "" if gpu == "0" else "unsupported")
            selector.report("dcgm", gpu, False, "not_installed")
        result = await src.poll()
    finally:
        await src.close()
    assert set(gpus_of(result)) == {"1", "1-2"}
    assert selector.owner("1") == "dcgm-exporter"
    assert selector.owner("1-2") == ""
