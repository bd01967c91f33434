"""GPU attribution rules, in order, and the /proc walk behind the process rule."""

from __future__ import annotations

import os
from pathlib import Path

from exporter.readings import ContainerGpus, PodAssignments, ProcessInfo
from exporter.sources.serving import procfs
from exporter.sources.serving.attribution import NONE, resolve, to_gpu_labels
from exporter.sources.serving.targets import Target
from tests.support.serving import inventory


def never(pid: int, ancestor: int) -> bool:
    return False


def test_explicit_gpus_win_and_accept_indexes_and_uuids() -> None:
    found = resolve(Target("http://x", gpus=("GPU-2", "0")), {"GPU-3"}, inventory(4), {}, (),
                    None, never)
    assert (found.gpus, found.via) == (("2", "0"), "explicit")


def test_unknown_uuid_is_dropped_and_next_rule_applies() -> None:
    found = resolve(Target("http://x", gpus=("GPU-nope",)), {"GPU-1"}, inventory(2), {}, (),
                    None, never)
    assert (found.gpus, found.via) == (("1",), "engine_label")


def test_without_inventory_indexes_pass_through() -> None:
    assert to_gpu_labels(["0", "GPU-x"], ()) == ("0",)


def test_pod_devices_from_the_kubernetes_source() -> None:
    pods = PodAssignments((
        ContainerGpus("ml", "vllm-0", "engine", "nvidia.com/gpu", ("GPU-3", "GPU-1"), ("3", "1")),
    ))
    target = Target("http://10.0.0.9:8000/metrics", namespace="ml", pod="vllm-0")
    found = resolve(target, set(), inventory(4), pods.pod_gpus(), (), None, never)
    assert (found.gpus, found.via) == (("1", "3"), "pod")


def test_processes_of_the_engine_and_its_children() -> None:
    procs = (ProcessInfo("1", 200), ProcessInfo("2", 300), ProcessInfo("3", 999))
    family = {200: 100, 300: 200, 999: 1}  # child -> parent; 100 is the API server

    def descends(pid: int, ancestor: int) -> bool:
        while pid in family or pid == ancestor:
            if pid == ancestor:
                return True
            pid = family[pid]
        return False

    gpus = inventory(4)
    found = resolve(Target("http://127.0.0.1:8000/metrics"), set(), gpus, {}, procs, 100, descends)
    assert (found.gpus, found.via) == (("1", "2"), "process")
    assert resolve(Target("http://h"), set(), gpus, {}, procs, None, descends) is NONE


def _fake_proc(root: Path, port: int) -> None:
    """A /proc with: 1 (init) -> 50 (listener on ``port``) -> 60 (GPU worker)."""
    (root / "net").mkdir(parents=True)
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when ... inode\n"
    rest = "00000000:00000000 00:00000000 00000000  0 0"
    (root / "net" / "tcp").write_text(
        header
        + f"   0: 00000000:{port:04X} 00000000:0000 0A {rest} 4242 1\n"
        + f"   1: 0100007F:0016 00000000:0000 01 {rest} 777 1\n"
    )
    for pid, ppid, comm in ((1, 0, "init"), (50, 1, "vllm serve (api)"), (60, 50, "Engine) Core")):
        (root / str(pid) / "fd").mkdir(parents=True)
        (root / str(pid) / "stat").write_text(f"{pid} ({comm}) S {ppid} 1 1 0 -1\n")
    os.symlink("socket:[4242]", root / "50" / "fd" / "7")
    os.symlink("/dev/null", root / "60" / "fd" / "0")


def test_procfs_finds_the_listener_and_its_descendants(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 8000)
    assert procfs.listening_inodes(8000, tmp_path) == {"4242"}
    assert procfs.listener_pid(8000, tmp_path) == 50
    assert procfs.listener_pid(9999, tmp_path) is None
    assert procfs.descends_from(60, 50, tmp_path)
    assert not procfs.descends_from(1, 50, tmp_path)
    assert not procfs.descends_from(12345, 50, tmp_path)  # vanished process


async def test_source_attributes_a_local_engine_through_proc(tmp_path: Path) -> None:
    from aiohttp import web

    from exporter.sources.serving.config import ServingConfig, ServingTarget
    from tests.support.serving import TARGET_GPUS, TOKENS, make_source, metric, start, vllm_text

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text=vllm_text(90.0))

    app = web.Application()
    app.router.add_get("/metrics", ok)
    runner, base = await start(app)
    port = int(base.rsplit(":", 1)[1])
    _fake_proc(tmp_path, port)
    procs = [ProcessInfo("1", 60), ProcessInfo("2", 60), ProcessInfo("3", 61)]
    config = ServingConfig(targets=[ServingTarget(url=f"{base}/metrics")], timeout=1)
    source = make_source(config, processes=procs, proc_root=tmp_path)
    try:
        result = await source.poll()
    finally:
        await source.close()
        await runner.cleanup()
    assert metric(result, TARGET_GPUS, via="process") == 2.0
    assert metric(result, TOKENS, gpu="1", kind="generation") == 45.0
    assert metric(result, TOKENS, gpu="2", kind="generation") == 45.0
    assert result.reading is not None and "3" not in result.reading.gpus


async def test_triton_series_go_to_the_gpu_they_name(tmp_path: Path) -> None:
    from aiohttp import web

    from exporter.sources.serving.config import ServingConfig, ServingTarget
    from tests.support.serving import BUSY, TOKENS, make_source, metric, start

    text = (Path(__file__).parent / "fixtures" / "triton_trtllm.txt").read_text()
    text = text.replace("GPU-aaaa", "GPU-0").replace("GPU-bbbb", "GPU-1")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=text)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner, base = await start(app)
    config = ServingConfig(targets=[ServingTarget(url=f"{base}/metrics")], timeout=1)
    source = make_source(config)
    try:
        result = await source.poll()
    finally:
        await source.close()
        await runner.cleanup()
    # Tokens carry no gpu_uuid: split over the model's GPUs; busy time is labelled GPU-0.
    assert metric(result, TOKENS, gpu="0", kind="generation", engine="triton") == 1000.0
    assert metric(result, TOKENS, gpu="1", kind="generation") == 1000.0
    assert metric(result, BUSY, gpu="0") == 3.0
    assert metric(result, BUSY, gpu="1") is None
